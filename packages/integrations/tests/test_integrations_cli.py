"""The ``ekbatan`` command line against real databases, through click's CliRunner.

Outputs are parsed from ``--json``; the people's tables are checked for their headers and lines.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from integrations_support import application_yml, as_json, ekbatan, notification_row

from ekbatan.core.migrations import eventlog_tables
from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.local_event_handler import notifications_table

FAR = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
PICKLED = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s."


def touch(url: str) -> None:
    """Connect once, so that the database exists (a SQLite file too), still empty."""
    engine = sa.create_engine(url)
    engine.connect().close()
    engine.dispose()


@pytest.fixture
def config(app_db, tmp_path) -> str:
    return str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))


@pytest.fixture
def migrated(config) -> str:
    ekbatan("migrate", "--config", config)
    return config


# ---------------------------------------------------------------- migrate


def test_migrate_applies_the_framework_tables_once(app_db, config):
    first = as_json("migrate", "--config", config)
    [shard] = first["shards"]
    assert shard["shard"] == "global/member-0"
    assert {m["component"] for m in shard["applied"]} == {"event_notifications", "outbox", "scheduled_tasks"}
    assert shard["already_applied"] == []
    again = ekbatan("migrate", "--config", config).stdout
    assert "already applied" in again and "0 migration(s) applied on 1 shard(s)" in again


def test_migrate_one_database_by_url(app_db):
    out = as_json("migrate", "--url", app_db.url, "--eventlog-schema", app_db.eventlog)
    assert [len(s["applied"]) for s in out["shards"]] == [6]
    engine = sa.create_engine(app_db.url)
    try:
        with engine.connect() as connection:
            tables = eventlog_tables(engine.dialect.name, app_db.eventlog)
            assert sa.inspect(connection).has_table(tables.events.name, schema=tables.events.schema)
    finally:
        engine.dispose()


# ---------------------------------------------------------------- tasks


@pytest.fixture
def client(app_db, migrated):
    engine = sa.create_engine(app_db.url)
    yield SchedulerClient(engine)
    engine.dispose()


def add(client: SchedulerClient, task: str, instance: str, when: datetime, data: bytes | None) -> None:
    assert client.repository.create_if_not_exists(NewExecution(task, instance, when, data))


def seed(client: SchedulerClient) -> None:
    now = datetime.now(UTC)
    add(client, "mail", "a", FAR, json.dumps({"to": "ann@example.com", "lines": list(range(20))}).encode())
    add(client, "mail", "b", now - timedelta(minutes=5), PICKLED)
    add(client, "report", "daily", now - timedelta(minutes=1), None)
    failing = client.get_scheduled_execution(("report", "daily")).execution
    client.repository.reschedule(
        failing, FAR + timedelta(hours=1), last_success=None, last_failure=now, consecutive_failures=3
    )
    add(client, "sync", "all", now - timedelta(seconds=5), b'"x"')
    assert client.repository.pick(client.get_scheduled_execution(("sync", "all")).execution, now)


def keys(out: Any) -> list[tuple[str, str]]:
    return [(row["task"], row["instance"]) for row in out["executions"]]


def test_tasks_list_with_its_filters(config, client):
    seed(client)
    listing = as_json("tasks", "list", "--config", config)
    assert keys(listing) == [("mail", "b"), ("sync", "all"), ("mail", "a"), ("report", "daily")]
    by_key = {(r["task"], r["instance"]): r for r in listing["executions"]}
    assert by_key[("mail", "a")]["data_preview"].startswith('{"to":"ann@example.com","lines":[0,1,')
    assert by_key[("mail", "a")]["data_preview"].endswith("…")
    assert by_key[("mail", "b")]["data_preview"] == f"hex:{PICKLED[:16].hex()}… ({len(PICKLED)} bytes)"
    assert by_key[("report", "daily")]["consecutive_failures"] == 3
    assert by_key[("sync", "all")]["picked"] and by_key[("sync", "all")]["picked_by"] == "SchedulerClient"
    assert by_key[("sync", "all")]["last_heartbeat"] is not None
    assert keys(as_json("tasks", "list", "--config", config, "--task", "mail")) == [
        ("mail", "b"),
        ("mail", "a"),
    ]
    assert keys(as_json("tasks", "list", "--config", config, "--failing")) == [("report", "daily")]
    assert keys(as_json("tasks", "list", "--config", config, "--picked")) == [("sync", "all")]
    assert keys(as_json("tasks", "list", "--config", config, "--due")) == [("mail", "b")]
    limited = as_json("tasks", "list", "--config", config, "--limit", "2")
    assert len(limited["executions"]) == 2 and limited["truncated"]
    people = ekbatan("tasks", "list", "--config", config).stdout.splitlines()
    # fits 100 columns: the columns that tell whether a row runs; the rest with --wide
    assert people[0].split() == ["TASK", "INSTANCE", "DUE", "PICKED", "BY", "HEARTBEAT", "FAILURES"]
    [mail_a] = [i for i, line in enumerate(people) if line.startswith("mail    a ")]
    assert people[mail_a].startswith("mail    a         2030-01-01T09:00:00Z  -")
    assert people[mail_a + 1].startswith('  data {"to":"ann@example.com"')  # its data under it
    assert people[-1] == "4 execution(s)"
    assert max(len(line) for line in people) <= 100
    wide = ekbatan("tasks", "list", "--config", config, "--wide").stdout.splitlines()
    assert wide[0].split() == [
        "TASK", "INSTANCE", "DUE", "PICKED", "PICKED", "BY", "HEARTBEAT", "LAST", "SUCCESS", "LAST",
        "FAILURE", "FAILURES", "DATA",
    ]  # fmt: skip
    assert wide[3].startswith("mail    a         2030-01-01T09:00:00Z  no")


def test_tasks_show_decodes_json_and_never_unpickles(config, client):
    seed(client)
    shown = as_json("tasks", "show", "--config", config, "mail", "a")
    assert shown["data"]["to"] == "ann@example.com" and shown["data_hex"] is None
    assert shown["execution_time"] == FAR.isoformat()
    raw = as_json("tasks", "show", "--config", config, "mail", "b")
    assert raw["data"] is None and raw["data_hex"] == PICKLED.hex()
    assert "not JSON: not decoded" in ekbatan("tasks", "show", "--config", config, "mail", "b").stdout
    missing = ekbatan("tasks", "show", "--config", config, "mail", "zzz", code=1)
    assert missing.stderr.strip() == (
        "error: no scheduled execution mail/zzz (it may have completed or been cancelled)"
    )


def test_reschedule_run_now_and_cancel(config, client):
    seed(client)
    moved = as_json(
        "tasks", "reschedule", "--config", config, "mail", "a", "--at", "2031-06-01T10:00:00+02:00"
    )
    assert moved["execution_time"] == "2031-06-01T08:00:00+00:00" and not moved["forced"]
    row = client.get_scheduled_execution(("mail", "a"))
    assert row.execution_time == datetime(2031, 6, 1, 8, tzinfo=UTC)
    before = datetime.now(UTC)
    out = ekbatan("tasks", "run-now", "--config", config, "report", "daily").stdout
    assert out.startswith("report/daily: due now, at ") and "(was due 2030-01-01T10:00:00Z)" in out
    row = client.get_scheduled_execution(("report", "daily"))
    assert before - timedelta(seconds=2) <= row.execution_time <= datetime.now(UTC)
    assert row.consecutive_failures == 0  # bookkeeping reset, as the client's reschedule does
    assert as_json("tasks", "cancel", "--config", config, "mail", "a")["action"] == "cancel"
    assert client.get_scheduled_execution(("mail", "a")) is None
    naive = ekbatan(
        "tasks", "reschedule", "--config", config, "mail", "b", "--at", "2031-01-01T00:00", code=2
    )
    assert "has no time zone" in naive.output


def test_a_picked_execution_is_refused_without_force(config, client):
    seed(client)
    for command in (["run-now"], ["reschedule", "--at", "2031-01-01T00:00:00Z"], ["cancel"]):
        refused = ekbatan("tasks", command[0], "--config", config, "sync", "all", *command[1:], code=1)
        assert refused.stdout == ""
        assert refused.stderr.startswith(
            "error: refused: sync/all is picked by SchedulerClient, whose last heartbeat is "
        )
        assert "pass --force" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    row = client.get_scheduled_execution(("sync", "all"))
    assert row.is_picked and row.execution.version == 2
    forced = as_json("tasks", "run-now", "--config", config, "sync", "all", "--force")
    assert forced["forced"] and forced["previous"]["picked"]
    row = client.get_scheduled_execution(("sync", "all"))
    assert not row.is_picked and row.execution.version == 3
    assert client.repository.pick(row.execution, datetime.now(UTC))
    ekbatan("tasks", "cancel", "--config", config, "sync", "all", "--force")
    assert client.get_scheduled_execution(("sync", "all")) is None


def test_tasks_by_url_use_that_database(app_db, client):
    seed(client)
    assert len(as_json("tasks", "list", "--url", app_db.url)["executions"]) == 4


# ---------------------------------------------------------------- events status


def test_events_status_counts_states_and_ages(app_db, migrated):
    engine = sa.create_engine(app_db.url)
    tables = eventlog_tables(engine.dialect.name, app_db.eventlog)
    now = datetime.now(UTC).replace(microsecond=0)
    shared = {
        "namespace": "wallet",
        "action_name": "Deposit",
        "action_params": {},
        "started_date": now,
        "completion_date": now,
        "payload": {},
    }

    def event(age: int, delivered: bool, event_type: str = "MoneyDeposited") -> dict[str, Any]:
        return {**shared, "id": uuid.uuid4(), "action_id": uuid.uuid4(), "event_type": event_type,
                "event_date": now - timedelta(seconds=age), "delivered": delivered}  # fmt: skip

    def notification(handler: str, state: str, attempts: int, age: int) -> dict[str, Any]:
        return notification_row(
            handler, state, event_date=now - timedelta(seconds=age), at=now, attempts=attempts
        )

    try:
        with engine.begin() as connection:
            connection.execute(
                tables.events.insert(),
                [event(120, False), event(30, False, "WalletOpened"), event(500, True)],
            )
            connection.execute(
                notifications_table(engine.dialect.name, app_db.eventlog).insert(),
                [
                    notification("mail", "SUCCEEDED", 1, 400),
                    notification("mail", "SUCCEEDED", 2, 300),
                    notification("mail", "FAILED", 3, 200),
                    notification("mail", "EXPIRED", 5, 9000),
                    notification("audit", "PENDING", 0, 90),
                ],
            )
    finally:
        engine.dispose()
    [shard] = as_json("events", "status", "--config", migrated)["shards"]
    assert shard["eventlog_schema"] == app_db.eventlog and shard["expired"] == 1
    undelivered = shard["undelivered_events"]
    assert undelivered["count"] == 2 and 120 <= undelivered["oldest_age_seconds"] < 400
    assert [t["event_type"] for t in undelivered["by_type"]] == ["MoneyDeposited", "WalletOpened"]
    handlers = {h["handler"]: h for h in shard["handlers"]}
    assert handlers["mail"] | {"oldest_open_age_seconds": None} == {
        "handler": "mail",
        "pending": 0,
        "succeeded": 2,
        "failed": 1,
        "expired": 1,
        "most_attempts": 5,
        "oldest_open_age_seconds": None,
    }
    assert 200 <= handlers["mail"]["oldest_open_age_seconds"] < 500
    assert handlers["audit"]["pending"] == 1 and 90 <= handlers["audit"]["oldest_open_age_seconds"] < 400
    people = ekbatan("events", "status", "--config", migrated).stdout
    assert "undelivered events: 2, the oldest 2m" in people
    assert "HANDLER  PENDING  SUCCEEDED  FAILED  EXPIRED  MOST ATTEMPTS  OLDEST OPEN" in people
    assert "expired notifications: 1" in people


def test_events_status_before_migrate_says_run_migrate(app_db, config):
    touch(app_db.url)
    failed = ekbatan("events", "status", "--config", config, code=1)
    assert "does not exist on global/member-0 primary-config" in failed.stderr
    assert f"run ekbatan migrate --config {config}" in failed.stderr


# ---------------------------------------------------------------- doctor


def test_doctor_passes_on_a_migrated_deployment(migrated):
    report = as_json("doctor", "--config", migrated)
    assert report["ok"]
    seen = {(c["check"], c["target"]) for c in report["checks"]}
    for pool in ("primary-config", "jobs-config"):
        assert ("connection", f"global/member-0 {pool}") in seen
    tables = [c["detail"].split(":")[0] for c in report["checks"] if c["check"] == "table"]
    assert len(tables) == 4 and tables[2] == "scheduled_tasks"
    assert (
        tables[3]
        == "scheduled_tasks_held, scheduled_tasks_pauses, scheduled_tasks_history, scheduled_tasks_traces present"
    )
    assert {c["status"] for c in report["checks"]} == {"pass"}
    assert [c["check"] for c in report["checks"]].count("clock") == 1


def test_doctor_fails_on_missing_tables_and_unreachable_pools(app_db, tmp_path):
    touch(app_db.url)
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    document = yaml.safe_load(config.read_text())
    [member] = document["ekbatan"]["sharding"]["groups"][0]["members"]
    member["configs"]["jobs-config"]["url"] = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    config.write_text(yaml.safe_dump(document))
    result = ekbatan("doctor", "--config", str(config), "--json", code=1)
    report = json.loads(result.stdout)
    assert not report["ok"]
    failed = {(c["check"], c["target"]): c["detail"] for c in report["checks"] if c["status"] == "fail"}
    assert "run ekbatan migrate" in failed[("table", "global/member-0 primary-config")]
    jobs = failed[("connection", "global/member-0 jobs-config")]
    assert (
        "u:***@127.0.0.1:1/x" in jobs and "ekbatan.sharding.groups[0].members[0].configs.jobs-config" in jobs
    )
    assert "secret" not in result.output


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "command",
    [["migrate"], ["tasks", "list"], ["tasks", "show", "t", "i"], ["events", "status"]],
)
def test_an_unreachable_database_is_one_line_with_the_password_masked(command):
    url = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    result = ekbatan(*command, "--url", url, code=1)
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: cannot connect to database primary-config at postgresql+psycopg://u:***@127.0.0.1:1/x"
    )
    assert "check that the server is running" in line
    assert "secret" not in result.output and "Traceback" not in result.output
    assert "Traceback" in ekbatan(*command, "--url", url, "--debug", code=1).stderr


def test_a_bad_key_names_the_key(tmp_path):
    config = application_yml(
        tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", extra={"jobs": {"polling-intervl": "PT1S"}}
    )
    result = ekbatan("tasks", "list", "--config", str(config), code=1)
    assert result.stderr == (
        f"error: invalid Ekbatan settings in {config}: ekbatan.jobs.polling-intervl: unknown key; "
        "did you mean 'polling-interval'?\n"
    )
    doctor = as_json("doctor", "--config", str(config), code=1)
    assert doctor["checks"][0]["status"] == "fail" and "polling-intervl" in doctor["checks"][0]["detail"]


def test_configuration_defaults_and_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EKBATAN_CONFIG", raising=False)
    missing = ekbatan("tasks", "list", code=2)
    assert "no configuration: pass --config PATH (or set EKBATAN_CONFIG) or --url URL" in missing.output
    both = ekbatan("migrate", "--config", "a.yml", "--url", "sqlite:///x.sqlite", code=2)
    assert "give either --config or --url, not both" in both.output
    application_yml(tmp_path, "sqlite:///app.sqlite")
    assert as_json("migrate")["shards"][0]["shard"] == "global/member-0"  # ./application.yml
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setenv("EKBATAN_CONFIG", str(tmp_path / "application.yml"))
    no_file = ekbatan("tasks", "list", code=1)  # the URL is relative to where the command runs
    assert "no SQLite database at app.sqlite" in no_file.stderr
    monkeypatch.delenv("EKBATAN_CONFIG")
    assert "not a SQLAlchemy URL" in ekbatan("tasks", "list", "--url", "nonsense", code=2).output
