"""``ekbatan tasks pause|resume|retry`` and the held executions in ``tasks list|show|run-now|
cancel``, on every dialect, through ``application.yml`` as an operator runs them (the SQLite
database then begins every transaction IMMEDIATE, as Ekbatan's pools do)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from integrations_support import application_yml, as_json, ekbatan

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    Scheduler,
    SchedulerClient,
    Tasks,
)

FAR = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


class MailDown(ConnectionError):
    pass


def refuse(instance, ctx) -> None:
    raise MailDown(f"mail server refused {instance.id}")


MAIL = (
    Tasks.one_time("mail")
    .on_failure(FailureHandlers.max_retries(0).retry_every(timedelta(0)).then_dead_letter())
    .execute(refuse)
)
REPORT = Tasks.one_time("report").execute(lambda instance, ctx: None)


@pytest.fixture
def config(app_db, tmp_path) -> str:
    path = str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))
    ekbatan("migrate", "--config", path)
    return path


@pytest.fixture
def engine(app_db, config):
    engine = sa.create_engine(app_db.url)
    yield engine
    engine.dispose()


@pytest.fixture
def client(engine) -> SchedulerClient:
    return SchedulerClient(engine, [MAIL, REPORT])


def run_due(engine: sa.Engine) -> int:
    scheduler = Scheduler.create(engine, MAIL, REPORT).failure_logging("OFF").execution_history().build()
    try:
        return scheduler.run_any_due_executions()
    finally:
        scheduler.stop()


def test_a_dead_execution_is_listed_shown_retried_and_cancelled(config, engine, client):
    now = datetime.now(UTC)
    client.schedule(MAIL.instance("m1", {"to": "ann@example.com"}), now)
    client.schedule(MAIL.instance("m2", {"to": "bob@example.com"}), now)
    assert run_due(engine) == 2

    dead = as_json("tasks", "list", "--dead", "--config", config)
    assert [(d["task"], d["instance"], d["state"]) for d in dead["executions"]] == [
        ("mail", "m1", "dead"),
        ("mail", "m2", "dead"),
    ]
    assert dead["executions"][0]["error_message"] == "mail server refused m1"
    text = ekbatan("tasks", "list", "--dead", "--config", config).stdout
    assert "MailDown: mail server refused m1" in text and "2 dead execution(s)" in text
    assert as_json("tasks", "list", "--config", config)["executions"] == []  # out of the schedule

    shown = ekbatan("tasks", "show", "mail", "m1", "--config", config).stdout
    assert "dead (out of the schedule" in shown and "raise MailDown" in shown
    assert as_json("tasks", "show", "mail", "m1", "--config", config)["data"] == {"to": "ann@example.com"}

    # run-now sends one dead execution back, due now; cancel drops the other
    assert (
        "back in the schedule, due now"
        in ekbatan("tasks", "run-now", "mail", "m1", "--config", config).stdout
    )
    assert "dead since" in ekbatan("tasks", "cancel", "mail", "m2", "--config", config).stdout
    assert client.get_held_executions() == []
    assert client.get_scheduled_execution(("mail", "m1")).consecutive_failures == 0

    # retry of a whole task, at a time
    run_due(engine)
    out = as_json("tasks", "retry", "mail", "--at", "2030-01-01T09:00:00Z", "--config", config)
    assert out["executions"] == ["m1"]
    assert client.get_scheduled_execution(("mail", "m1")).execution_time == FAR
    err = ekbatan("tasks", "retry", "mail", "--config", config, code=1).output
    assert "error: no dead execution mail (ekbatan tasks list --dead lists them)" in err


def test_pause_and_resume_a_task_and_an_execution(config, engine, client):
    now = datetime.now(UTC)
    client.schedule(REPORT.instance("r1"), now)
    client.schedule(REPORT.instance("r2"), FAR)

    out = ekbatan(
        "tasks", "pause", "report", "--reason", "new template", "--by", "ops", "--config", config
    ).stdout
    assert "task report paused" in out and "note:" not in out
    assert "was paused already" in ekbatan("tasks", "pause", "report", "--config", config).stdout
    assert run_due(engine) == 0  # a worker leaves it due

    listing = ekbatan("tasks", "list", "--config", config).stdout
    assert "task report is paused since" in listing and "(new template)" in listing
    listed = as_json("tasks", "list", "--config", config)
    assert {e["paused"] for e in listed["executions"]} == {True}
    assert listed["paused_tasks"][0] | {"paused_at": None} == {
        "task": "report", "paused_at": None, "paused_by": "ops", "reason": "new template"
    }  # fmt: skip

    # one execution paused on its own: out of the schedule with its due time
    assert (
        "taken out of the schedule with its due time 2030-01-01T09:00:00Z"
        in ekbatan("tasks", "pause", "report", "r2", "--config", config).stdout
    )
    paused = as_json("tasks", "list", "--paused", "--config", config)
    assert [p["task"] for p in paused["paused_tasks"]] == ["report"]
    assert [(e["instance"], e["execution_time"]) for e in paused["executions"]] == [("r2", FAR.isoformat())]

    resumed = as_json("tasks", "resume", "report", "--config", config)
    assert resumed["task_pause_lifted"] and resumed["executions"] == ["r2"]
    assert run_due(engine) == 1
    assert client.get_scheduled_execution(("report", "r2")).execution_time == FAR
    err = ekbatan("tasks", "resume", "report", "--config", config, code=1).output
    assert "error: report is not paused (ekbatan tasks list --paused lists what is)" in err


def test_pausing_a_name_nothing_has_says_so(config):
    out = ekbatan("tasks", "pause", "reprot", "--config", config).stdout
    assert "note: no execution of task reprot is scheduled or held now" in out


def test_usage_errors_name_the_clash(config):
    err = ekbatan("tasks", "list", "--dead", "--paused", "--config", config, code=2).output
    assert "--dead and --paused exclude each other" in err
    err = ekbatan("tasks", "list", "--dead", "--failing", "--config", config, code=2).output
    assert "--dead and --failing exclude each other" in err


def test_controls_before_migrate_say_run_migrate(app_db, tmp_path, engine):
    # migrated once (fixture), then the companion tables dropped: as a deployment migrated
    # before they existed
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE scheduled_tasks_pauses")
        conn.exec_driver_sql("DROP TABLE scheduled_tasks_held")
    config = str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))
    err = ekbatan("tasks", "pause", "report", "--config", config, code=1).output
    assert "table scheduled_tasks_held does not exist" in err and "run ekbatan migrate" in err
    # the listing still works, with nothing paused
    assert as_json("tasks", "list", "--config", config)["paused_tasks"] == []
    # and the doctor says what is missing, as a warning
    report = as_json("doctor", "--config", config)
    [warning] = [c for c in report["checks"] if c["status"] == "warn"]
    assert warning["detail"].startswith("scheduled_tasks_held, scheduled_tasks_pauses missing")
    assert "run ekbatan migrate" in warning["detail"]


def test_history_sums_up_each_task_and_lists_one_tasks_runs(config, engine, client):
    now = datetime.now(UTC)
    client.schedule(MAIL.instance("m1"), now)
    client.schedule(REPORT.instance("r1"), now)
    client.schedule(REPORT.instance("r2"), now)
    assert run_due(engine) == 3

    summary = {t["task"]: t for t in as_json("tasks", "history", "--config", config)["tasks"]}
    assert (summary["mail"]["runs"], summary["mail"]["failures"], summary["mail"]["last_result"]) == (
        1,
        1,
        "dead",
    )
    assert (summary["report"]["runs"], summary["report"]["failures"]) == (2, 0)
    runs = as_json("tasks", "history", "mail", "--failed", "--config", config)["runs"]
    assert [(r["instance"], r["result"], r["error_class"]) for r in runs] == [
        ("m1", "dead", f"{__name__}.MailDown")
    ]
    text = ekbatan("tasks", "history", "report", "r2", "--config", config).stdout
    assert "r2" in text and "r1" not in text and "1 run(s)" in text
    # without a name, --failed lists the runs of every task that did not succeed
    every = as_json("tasks", "history", "--failed", "--config", config)["runs"]
    assert [(r["task"], r["instance"], r["result"]) for r in every] == [("mail", "m1", "dead")]
    text = ekbatan("tasks", "history", "--failed", "--config", config).stdout
    assert (
        text.splitlines()[0].split()[:2] == ["TASK", "FINISHED"] and "mail" in text and "report" not in text
    )
    err = ekbatan("tasks", "history", "--since-hours", "0", "--config", config, code=2).output
    assert "'0' is not positive" in err
