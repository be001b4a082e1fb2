"""What a new user meets on the command line, through the real ``ekbatan`` entry point in a
subprocess: one-line errors (JSON with ``--json``), a worker started too early or without its
database, what a worker says it runs and how it stopped, refusals of picked rows, tables that
fit a terminal, and ``migrate`` on a database whose history outlived a table.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from integrations_support import application_yml

from ekbatan.core import migrate
from ekbatan.core.migrations import MigrationTarget
from testsupport import wait_until
from testsupport.previous_eventlog import previous_eventlog_migrations

EKBATAN = str(Path(sys.executable).with_name("ekbatan"))

SLOW_JOB = '''
import time
from datetime import timedelta

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job


@distributed_job
class StuckJob(DistributedJob):
    """Runs far longer than the shutdown waits, so that stopping abandons it."""

    def name(self) -> str:
        return "stuck-job"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        time.sleep(120)
'''

HANDLER = """
from ekbatan.core import ModelEvent
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


class ParcelShipped(ModelEvent):
    carrier: str


@event_handler
class ShippingNotifier(EventHandler[ParcelShipped]):
    def name(self) -> str:
        return "shipping-notifier"

    def event_type(self) -> type[ParcelShipped]:
        return ParcelShipped

    def handle(self, envelope: EventEnvelope[ParcelShipped]) -> None:
        pass
"""


def ekbatan(cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([EKBATAN, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result


def package(directory: Path, name: str, source: str) -> None:
    (directory / name).mkdir()
    (directory / name / "__init__.py").write_text("")
    (directory / name / "module.py").write_text(textwrap.dedent(source))


def touch(url: str) -> None:
    """Connect once, so that the database exists (a SQLite file too), still empty."""
    engine = sa.create_engine(url)
    engine.connect().close()
    engine.dispose()


def query(url: str, sql: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            result = connection.execute(sa.text(sql), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


def sqlite_app(directory: Path) -> tuple[Path, str]:
    url = f"sqlite:///{directory / 'app.sqlite'}"
    return application_yml(directory, url), url


# ---------------------------------------------------------------- worker before migrate


def test_a_worker_before_migrate_is_one_line_naming_the_table(app_db, tmp_path):
    package(tmp_path, "stuckjobs", SLOW_JOB)
    touch(app_db.url)
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    result = ekbatan(tmp_path, "worker", "--config", str(config), "--packages", "stuckjobs", code=1)
    assert result.stderr.count("\n") == 1, result.stderr  # no log lines, no tracebacks
    assert result.stderr.startswith(
        "error: table scheduled_tasks does not exist on global/member-0 jobs-config"
    )
    assert f"run ekbatan migrate --config {config}" in result.stderr
    assert "JobRegistryError" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.dialects("postgres", "mariadb")
def test_a_worker_whose_database_refuses_it_suggests_wait_for_database(dialect, app_db, tmp_path):
    package(tmp_path, "stuckjobs", SLOW_JOB)
    url = sa.engine.make_url(app_db.url).set(username="no_such_role", password="s3cret")
    config = application_yml(tmp_path, url.render_as_string(hide_password=False))
    result = ekbatan(tmp_path, "worker", "--config", str(config), "--packages", "stuckjobs", code=1)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: cannot connect to global/member-0 jobs-config"), result.stderr
    assert "--wait-for-database" in result.stderr and "require_database" not in result.stderr
    assert "s3cret" not in result.stderr


# ---------------------------------------------------------------- --json errors


@pytest.mark.slow  # several ekbatan processes, a second or so each
def test_with_json_an_error_is_one_json_object_on_stderr(tmp_path):
    config, url = sqlite_app(tmp_path)
    touch(url)
    missing = ekbatan(tmp_path, "tasks", "list", "--config", str(config), "--json", code=1)
    assert missing.stdout == ""
    error = json.loads(missing.stderr)  # the whole of stderr is the one object
    assert error["exit"] == 1 and error["error"].startswith("table scheduled_tasks does not exist")
    for args, code in (
        (["tasks", "list", "--json", "--bogus"], 2),  # click's own usage error
        (["tasks", "list", "--json", "--config", str(config), "--url", url], 2),  # raised by the command
        (["tasks", "show", "a", "b", "--json", "--config", str(config)], 1),
    ):
        result = ekbatan(tmp_path, *args, code=code)
        assert json.loads(result.stderr)["exit"] == code, result.stderr
    # without --json, the people's line
    plain = ekbatan(tmp_path, "tasks", "list", "--config", str(config), code=1)
    assert plain.stderr.startswith("error: table scheduled_tasks")


# ---------------------------------------------------------------- what a worker says


@pytest.mark.slow
def test_the_worker_names_handlers_and_says_they_do_not_run_here_when_handling_is_off(tmp_path):
    package(tmp_path, "shipping", HANDLER)
    config, url = sqlite_app(tmp_path)
    config = application_yml(tmp_path, url, handling=False)
    ekbatan(tmp_path, "migrate", "--config", str(config))
    for as_json in (True, False):
        worker = subprocess.Popen(
            [
                EKBATAN,
                "worker",
                "--config",
                str(config),
                "--packages",
                "shipping",
                *(["--json"] if as_json else []),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = worker.stdout.readline()  # the start line, or EOF if it failed
            if as_json:
                started = json.loads(line)
                assert started["handlers"] == ["shipping-notifier"], started
                assert started["handling_enabled"] is False
                assert started["jobs"] == ["ekbatan-event-fanout"]
            else:
                assert "1 handler(s) (shipping-notifier), not run in this process" in line, line
                assert "handling.enabled is false" in line
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=10)


@pytest.mark.slow
def test_an_abandoning_stop_says_so_and_cancel_explains_the_dead_window(tmp_path):
    package(tmp_path, "stuckjobs", SLOW_JOB)
    _, url = sqlite_app(tmp_path)
    jobs = {"polling-interval": "PT0.1S", "heartbeat-interval": "PT1S", "shutdown-max-wait": "PT0.2S"}
    config = application_yml(tmp_path, url, extra={"jobs": jobs})
    ekbatan(tmp_path, "migrate", "--config", str(config))
    worker = subprocess.Popen(
        [EKBATAN, "worker", "--config", str(config), "--packages", "stuckjobs", "--json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(worker.stdout.readline())["event"] == "started"
        wait_until(
            lambda: query(
                url, "SELECT picked FROM scheduled_tasks WHERE task_name = 'stuck-job' AND picked = 1"
            ),
            timeout=30,
            message="stuck-job picked",
        )
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert json.loads(out.splitlines()[-1]) == {"event": "stopped", "signal": "SIGTERM", "abandoned": 1}
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
    [(holder,)] = query(
        url, "SELECT picked_by FROM scheduled_tasks WHERE task_name = 'stuck-job' AND picked = 1"
    )

    # while the heartbeat is young: running now, and when it would be revived
    refused = ekbatan(tmp_path, "tasks", "cancel", "stuck-job", "recurring", "--config", str(config), code=1)
    assert f"is picked by {holder}, whose last heartbeat is " in refused.stderr, refused.stderr
    assert "dead window of 6s (heartbeat interval 1s × 6 missed heartbeats)" in refused.stderr

    # once it is older than the dead window (1 s × 6): the worker is gone, a running one revives it
    def refusal() -> str:
        return ekbatan(
            tmp_path, "tasks", "cancel", "stuck-job", "recurring", "--config", str(config), code=1
        ).stderr

    def refusal_once_gone() -> str | None:
        text = refusal()
        return text if "that worker looks gone" in text else None

    gone = wait_until(
        refusal_once_gone,
        timeout=30,
        interval=0.5,
        message="the refusal says the worker is gone once the heartbeat is older than the window",
    )
    assert "older than the dead window of 6s" in gone, gone
    assert "it is running now" not in gone


def test_the_unabandoned_stop_says_stopped_cleanly(tmp_path):
    # the other half of the message: nothing ran, nothing abandoned
    package(tmp_path, "shipping", HANDLER)
    config, _ = sqlite_app(tmp_path)
    ekbatan(tmp_path, "migrate", "--config", str(config))
    worker = subprocess.Popen(
        [EKBATAN, "worker", "--config", str(config), "--packages", "shipping"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "ekbatan worker" in worker.stdout.readline()
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert out.splitlines()[-1].endswith("SIGTERM received; stopped cleanly"), out
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)


# ---------------------------------------------------------------- the event pipeline's jobs


def test_run_now_on_an_event_pipeline_job_says_it_keeps_running(tmp_path):
    config, url = sqlite_app(tmp_path)
    ekbatan(tmp_path, "migrate", "--config", str(config))
    now = datetime.now(UTC).replace(tzinfo=None)
    query(
        url,
        "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, picked_by, "
        "last_heartbeat, version) VALUES ('ekbatan-event-fanout', 'recurring', :at, 1, 'node-a', :at, 2)",
        at=now,
    )
    refused = ekbatan(
        tmp_path, "tasks", "run-now", "ekbatan-event-fanout", "recurring", "--config", str(config), code=1
    )
    assert "Wait for it to finish" not in refused.stderr, refused.stderr
    assert "never finish" in refused.stderr and "running already" in refused.stderr
    query(url, "UPDATE scheduled_tasks SET picked = 0, picked_by = NULL, last_heartbeat = NULL")
    moved = ekbatan(
        tmp_path, "tasks", "run-now", "ekbatan-event-fanout", "recurring", "--config", str(config)
    )
    assert "keeps running it" in moved.stdout and "they do not finish" in moved.stdout, moved.stdout


# ---------------------------------------------------------------- tables fit 100 columns


@pytest.mark.slow  # several ekbatan processes, a second or so each
def test_tables_fit_100_columns_unless_wide(tmp_path):
    config, url = sqlite_app(tmp_path)
    migrated = ekbatan(tmp_path, "migrate", "--config", str(config)).stdout.splitlines()
    assert max(map(len, migrated)) <= 100, migrated
    query(
        url,
        "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version, task_data) "
        "VALUES ('a-task-with-a-rather-long-name', 'instance-0001', :at, 0, 1, :data)",
        at=datetime(2030, 1, 1),
        data=json.dumps({"customer": "somebody@example.com", "lines": list(range(20))}).encode(),
    )
    listing = ekbatan(tmp_path, "tasks", "list", "--config", str(config)).stdout.splitlines()
    assert max(map(len, listing)) <= 100, listing
    assert "2030-01-01T00:00:00Z" in listing[1]  # times are never cut
    wide = ekbatan(tmp_path, "tasks", "list", "--config", str(config), "--wide").stdout.splitlines()
    assert max(map(len, wide)) > 100 and "LAST SUCCESS" in wide[0]
    doctor = ekbatan(tmp_path, "doctor", "--config", str(config)).stdout.splitlines()
    assert max(map(len, (line for line in doctor if not line.startswith("note:")))) <= 100, doctor
    # the detail column wraps rather than being cut: every word is still there
    assert "eventlog_event_notifications: 19 expected columns present" in " ".join(
        " ".join(line.split()) for line in doctor
    ).replace(" pass ", "\npass ")


# ---------------------------------------------------------------- migrate


@pytest.mark.slow  # several ekbatan processes, a second or so each
def test_migrate_re_applies_a_version_whose_table_is_gone(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    touch(app_db.url)
    first = json.loads(ekbatan(tmp_path, "migrate", "--config", str(config), "--json").stdout)
    assert all(m["on_this_dialect"] for m in first["shards"][0]["applied"]), first

    query(app_db.url, "DROP TABLE scheduled_tasks")
    repaired = ekbatan(tmp_path, "migrate", "--config", str(config))
    [line] = [line for line in repaired.stdout.splitlines() if "scheduled_tasks 0001" in line]
    assert "re-applied" in line, repaired.stdout
    # the later version of the component (its companion tables) is applied again after it
    assert "4 re-applied: recorded as applied, but a table they create was missing" in repaired.stdout
    assert "scheduled_tasks" in repaired.stderr  # the WARNING names the table
    assert query(app_db.url, "SELECT COUNT(*) FROM scheduled_tasks") == [(0,)]
    again = json.loads(ekbatan(tmp_path, "migrate", "--config", str(config), "--json").stdout)
    assert again["shards"][0]["reapplied"] == [] and again["shards"][0]["applied"] == []
    ekbatan(tmp_path, "doctor", "--config", str(config))


CONTRIBUTOR = """
def migrations():
    def statements(dialect):
        if dialect in ("mariadb", "mysql"):
            return ["CREATE INDEX IF NOT EXISTS gizmo_open ON gizmos (state)"]
        return []  # PostgreSQL and SQLite have had it from the start

    return [("gizmos", "2", "index of open gizmos (MariaDB, MySQL)", statements)]
"""


def test_migrate_labels_a_version_with_nothing_for_the_dialect(tmp_path):
    """Another package's contribution, installed beside Ekbatan's (a distribution on the path
    with an ``ekbatan.migrations`` entry point): a version with no statement for SQLite is
    recorded, and shown as not on it."""
    site = tmp_path / "site"
    (site / "gizmo_migrations-1.0.dist-info").mkdir(parents=True)
    (site / "gizmo_migrations.py").write_text(textwrap.dedent(CONTRIBUTOR))
    (site / "gizmo_migrations-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: gizmo-migrations\nVersion: 1.0\n"
    )
    (site / "gizmo_migrations-1.0.dist-info" / "entry_points.txt").write_text(
        "[ekbatan.migrations]\ngizmos = gizmo_migrations:migrations\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(site)}
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"

    def run_migrate(*flags: str) -> str:
        done = subprocess.run(
            [EKBATAN, "migrate", "--url", url, *flags],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout

    applied = json.loads(run_migrate("--json"))["shards"][0]["applied"]
    [gizmos] = [m for m in applied if m["component"] == "gizmos"]
    assert gizmos["on_this_dialect"] is False
    assert all(m["on_this_dialect"] for m in applied if m["component"] != "gizmos")
    [line] = [line for line in run_migrate().splitlines() if "gizmos 2" in line]
    assert "not on sqlite" in line


@pytest.mark.slow  # three ekbatan processes
def test_migrate_and_doctor_on_a_database_of_the_previous_release(app_db, tmp_path):
    """Migrated by a release in which core contributed event_notifications (``eventlog`` 1 to 3):
    this release's first migrate records its own components, changing nothing and warning of
    nothing, lists no ``eventlog`` version (nothing contributes them any more), and doctor finds
    every table."""
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    touch(app_db.url)
    migrate(
        [MigrationTarget("previous", app_db.url, app_db.eventlog)],
        contributions=previous_eventlog_migrations(),
    )
    before = query(app_db.url, "SELECT component, version, checksum FROM ekbatan_schema_history")

    upgraded = ekbatan(tmp_path, "migrate", "--config", str(config), "--json")
    [shard] = json.loads(upgraded.stdout)["shards"]
    listed = [
        (m["component"], m["version"])
        for key in ("applied", "already_applied", "reapplied")
        for m in shard[key]
    ]
    assert [(c, v) for c, v in listed if c != "scheduled_tasks"] == [
        ("event_notifications", "1"),
        ("outbox", "1"),
    ]
    assert shard["reapplied"] == [] and upgraded.stderr == "", upgraded.stderr  # no warning
    history = query(app_db.url, "SELECT component, version, checksum FROM ekbatan_schema_history")
    assert set(before) <= set(history)  # the previous versions' rows as they were

    doctor = json.loads(ekbatan(tmp_path, "doctor", "--config", str(config), "--json").stdout)
    tables = [c["detail"] for c in doctor["checks"] if c["check"] == "table"]
    assert any("event_notifications: 19 expected columns present" in t for t in tables), tables
    again = ekbatan(tmp_path, "migrate", "--config", str(config))
    assert "0 migration(s) applied" in again.stdout and again.stderr == "", again.stderr


def test_migrate_re_creates_a_dropped_notifications_table(tmp_path):
    config, url = sqlite_app(tmp_path)
    ekbatan(tmp_path, "migrate", "--config", str(config))
    query(url, "DROP TABLE eventlog_event_notifications")
    out = json.loads(ekbatan(tmp_path, "migrate", "--config", str(config), "--json").stdout)
    assert [(m["component"], m["version"]) for m in out["shards"][0]["reapplied"]] == [
        ("event_notifications", "1")
    ]
    assert query(url, "SELECT COUNT(*) FROM eventlog_event_notifications") == [(0,)]


def test_refused_change_before_the_heartbeat_window_uses_the_configured_interval(tmp_path):
    config, url = sqlite_app(tmp_path)  # heartbeat-interval PT1S in the test configuration
    ekbatan(tmp_path, "migrate", "--config", str(config))
    now = datetime.now(UTC).replace(tzinfo=None)
    query(
        url,
        "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, picked_by, "
        "last_heartbeat, version) VALUES ('report', 'daily', :at, 1, 'node-b', :beat, 2)",
        at=now,
        beat=now - timedelta(minutes=5),
    )
    refused = ekbatan(tmp_path, "tasks", "reschedule", "report", "daily", "--at", "2030-01-01T00:00:00Z",
                      "--config", str(config), code=1)  # fmt: skip
    found = re.search(
        r"is picked by node-b, whose last heartbeat is 3\d\ds old, older than the dead window of 6s",
        refused.stderr,
    )
    assert found, refused.stderr
    by_url = ekbatan(tmp_path, "tasks", "cancel", "report", "daily", "--url", url, code=1)
    assert "dead window of 60s (heartbeat interval 10s × 6 missed heartbeats, the defaults)" in by_url.stderr
