"""The operator view's overview beyond the counts: per task, runs, failures and durations from
the execution history (recorded by a real scheduler); the scheduler nodes seen, from the
heartbeats of their real claims and from the history; and, for a runtime, the event pipeline per
handler — on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from integrations_support import AppDatabase, application_yml, ekbatan, notification_row
from starlette.testclient import TestClient

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    Scheduler,
    SchedulerClient,
    SettableClock,
    Tasks,
    create_table,
    history_table_name,
)
from ekbatan.integrations.operator import operator_app
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime
from ekbatan.local_event_handler import notifications_table
from testsupport import wait_until
from testsupport.held_runs import RunGate, hold_claims, open_gate_after, release

DIALECTS = ("sqlite", "postgres", "mariadb")


# ---------------------------------------------------------------- reading the page


def row_of(page: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(html.escape(value))}"[^>]*>(.*?)</tr>', page, re.S)
    assert found is not None, f"no row {attribute}={value!r} on the page"
    return found.group(1)


def cells(row: str, attribute: str) -> dict[str, str]:
    """``{field: text}`` of the row's cells marked ``attribute="field"``."""
    return {k: v.strip() for k, v in re.findall(rf'{attribute}="(\w+)">(.*?)</td>', row, re.S)}


def history_cells(page: str, task: str) -> dict[str, str]:
    return cells(row_of(page, "data-task", task), "data-history")


# ---------------------------------------------------------------- history, recorded by a real scheduler


class Timed:
    """A task body that takes ``abs(data)`` ms of the scheduler's clock and fails when negative."""

    def __init__(self, clock: SettableClock) -> None:
        self.clock = clock

    def __call__(self, instance: Any, ctx: object) -> None:
        self.clock.advance(timedelta(milliseconds=abs(instance.data)))
        if instance.data < 0:
            raise ValueError("no prices today")


def record_runs(engine: sa.Engine, now: datetime) -> None:
    """import: one run two days ago; three 3 h ago (10, 20 ms, and 30 ms failed); two 30 min
    ago (40 ms, and 50 ms failed). cleanup: one run 30 min ago, its row removed after it. Every
    run on node ``node-h``."""
    clock = SettableClock(now - timedelta(days=2))
    body = Timed(clock)
    imports = (
        Tasks.one_time("import", int)
        .on_failure(FailureHandlers.max_retries(1).retry_every(timedelta(days=7)).then_dead_letter())
        .execute(body)
    )
    cleanup = Tasks.one_time("cleanup", int).execute(body)
    scheduler = (
        Scheduler.create(engine, imports, cleanup)
        .clock(clock)
        .scheduler_name("node-h")
        .failure_logging("OFF")
        .execution_history()
        .build()
    )
    try:
        for when, runs in (
            (now - timedelta(days=2), [(imports, "i0", 10)]),
            (now - timedelta(hours=3), [(imports, "i1", 10), (imports, "i2", 20), (imports, "i3", -30)]),
            (now - timedelta(minutes=30), [(imports, "i4", 40), (imports, "i5", -50), (cleanup, "c1", 5)]),
        ):
            clock.set(when)
            for task, instance, data in runs:
                scheduler.schedule(task.instance(instance, data), when)
            assert scheduler.run_any_due_executions() == len(runs)
    finally:
        scheduler.stop()
    client = SchedulerClient(engine)
    wait_until(lambda: len(client.history(limit=50)) == 7, message="the 7 runs are in the history")


@pytest.mark.dialects(*DIALECTS)
def test_each_task_shows_its_runs_failures_and_durations_of_the_last_hour_and_day(database):
    engine = database.engine()
    try:
        create_table(engine)
        now = datetime.now(UTC)
        record_runs(engine, now)
        with TestClient(operator_app(SchedulerClient(engine))) as web:
            page = web.get("/").text
        assert "History is off" not in page
        # the run of two days ago is in neither window; p50/p95 are nearest-rank over 10..50 ms
        assert history_cells(page, "import") == {
            "runs_hour": "2",
            "failures_hour": "1",
            "runs_day": "5",
            "failures_day": "2",
            "p50_ms": "30 ms",
            "p95_ms": "50 ms",
        }
        # cleanup's row went with its run: the history alone puts it on the overview
        assert history_cells(page, "cleanup") == {
            "runs_hour": "1",
            "failures_hour": "0",
            "runs_day": "1",
            "failures_day": "0",
            "p50_ms": "5 ms",
            "p95_ms": "5 ms",
        }
        node = row_of(page, "data-node", "node-h")
        # node-h holds nothing now; it finished import's i4, i5 and cleanup's c1 in the hour
        assert cells(node, "data-node-field") == {
            "running": "0",
            "newest_heartbeat": "—",
            "oldest_heartbeat": "—",
            "runs_hour": "3",
        }
    finally:
        engine.dispose()


@pytest.mark.dialects(*DIALECTS)
def test_without_the_history_table_the_figures_are_dashes_and_a_note_says_why(database):
    engine = database.engine()
    try:
        create_table(engine)
        with engine.begin() as connection:
            connection.execute(sa.text(f"DROP TABLE {history_table_name('scheduled_tasks')}"))
        client = SchedulerClient(engine)
        client.schedule(Tasks.one_time("mail").execute(lambda i, c: None).instance("m-1"))
        with TestClient(operator_app(client)) as web:
            response = web.get("/")
        assert response.status_code == 200
        assert "History is off" in response.text
        assert set(history_cells(response.text, "mail").values()) == {"—"}
        assert "No node holds an execution now." in response.text
    finally:
        engine.dispose()


# ---------------------------------------------------------------- nodes, from real claims


@pytest.fixture
def gate() -> Iterator[RunGate]:
    yield from open_gate_after()


def claim(
    engine: sa.Engine, clock: SettableClock, node: str, gate: RunGate, runs: int
) -> list[threading.Thread]:
    """``runs`` executions claimed by ``node`` (on its own clock) and held running."""
    task = Tasks.one_time("held-open").execute(gate.run)
    scheduler = (
        Scheduler.create(engine, task).clock(clock).scheduler_name(node).failure_logging("OFF").build()
    )
    return hold_claims(scheduler, runs)


@pytest.mark.dialects(*DIALECTS)
def test_nodes_holding_executions_show_their_heartbeat_ages_and_a_clock_ahead(database, gate):
    engine = database.engine()
    threads: list[threading.Thread] = []
    try:
        create_table(engine)
        client = SchedulerClient(engine)
        task = Tasks.one_time("held-open").execute(gate.run)
        now = datetime.now(UTC)
        for n in range(3):
            client.schedule(task.instance(f"h-{n}"), now - timedelta(hours=2))
        # node-late heartbeats by a clock 10 minutes behind the page's; node-ahead an hour ahead
        threads += claim(engine, SettableClock(now - timedelta(minutes=10)), "node-late", gate, 2)
        wait_until(lambda: sum(c.running for c in client.claims_by_node()) == 2, message="node-late claims 2")
        threads += claim(engine, SettableClock(now + timedelta(hours=1)), "node-ahead", gate, 1)
        wait_until(lambda: len(client.claims_by_node()) == 2, message="node-ahead claims 1")

        with TestClient(operator_app(client)) as web:
            page = web.get("/").text
        late = row_of(page, "data-node", "node-late")
        assert cells(late, "data-node-field")["running"] == "2"
        assert re.fullmatch(r"10m \d+s", cells(late, "data-node-field")["newest_heartbeat"])
        assert "clock-offset" not in late
        ahead = row_of(page, "data-node", "node-ahead")
        assert cells(ahead, "data-node-field")["running"] == "1"
        assert cells(ahead, "data-node-field")["newest_heartbeat"].startswith("-59m")
        assert re.search(r'class="badge clock-offset"[^>]*>clock 59m \d+s ahead<', ahead)
        assert cells(ahead, "data-node-field")["runs_hour"] == "0"  # history on, nothing finished
    finally:
        release(gate, threads)
        engine.dispose()


# ---------------------------------------------------------------- the event pipeline of a runtime


def insert_notifications(url: str, eventlog: str, now: datetime) -> None:
    engine = sa.create_engine(url)
    table = notifications_table(engine.dialect.name, eventlog)

    def notification(handler: str, state: str, age: int) -> dict[str, Any]:
        return notification_row(handler, state, event_date=now - timedelta(seconds=age), at=now)

    try:
        with engine.begin() as connection:
            connection.execute(
                table.insert(),
                [
                    notification("mail", "SUCCEEDED", 400),
                    notification("mail", "FAILED", 200),
                    notification("mail", "FAILED", 150),
                    notification("mail", "PENDING", 60),
                    notification("mail", "EXPIRED", 9000),
                ],
            )
    finally:
        engine.dispose()


def runtime_on(directory: Path, app_db: AppDatabase, eventlog: str) -> EkbatanRuntime:
    from integrations_sample.handlers import DepositCounter, DepositLedger

    directory.mkdir(exist_ok=True)
    config = application_yml(directory, app_db.url, eventlog=eventlog)
    return build_runtime(
        str(config), ["integrations_sample.domain"], extra_handlers=[DepositCounter(DepositLedger())]
    )


@pytest.mark.dialects(*DIALECTS)
def test_a_runtime_shows_its_event_pipeline_per_handler(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    ekbatan("migrate", "--config", str(config))
    now = datetime.now(UTC).replace(microsecond=0)
    insert_notifications(app_db.url, app_db.eventlog, now)
    runtime = runtime_on(tmp_path / "app", app_db, app_db.eventlog)
    try:
        with TestClient(operator_app(runtime)) as web:
            page = web.get("/").text
        with TestClient(operator_app(runtime, read_only=False)) as web:
            acting = web.get("/").text
        with TestClient(operator_app(runtime.scheduler_client)) as web:
            bare = web.get("/").text
    finally:
        runtime.stop()
    assert "Event pipeline" in page and "global/member-0" in page
    mail = row_of(page, "data-handler", "mail")
    figures = cells(mail, "data-pipeline")
    assert figures | {"oldest_open": ""} == {"pending": "1", "failed": "2", "expired": "1", "oldest_open": ""}
    # the oldest open one is the failed one of 200 s ago (the expired one is not open)
    assert re.fullmatch(r"3m \d+s", figures["oldest_open"])
    # the runtime's own handler, without a notification yet, is listed with zeros
    counter = cells(row_of(page, "data-handler", "deposit-counter"), "data-pipeline")
    assert counter == {"pending": "0", "failed": "0", "expired": "0", "oldest_open": "—"}
    # re-drive buttons for what is held (failed, expired), only where actions are offered
    assert 'data-action="redrive"' not in page
    acting_mail = row_of(acting, "data-handler", "mail")
    assert acting_mail.count('data-action="redrive"') == 2
    assert 'value="FAILED"' in acting_mail and 'value="EXPIRED"' in acting_mail
    assert 'data-action="redrive"' not in row_of(acting, "data-handler", "deposit-counter")
    assert "Event pipeline" not in bare and "data-handler" not in bare


@pytest.mark.dialects(*DIALECTS)
def test_a_runtime_whose_shard_has_no_eventlog_tables_shows_no_pipeline(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    ekbatan("migrate", "--config", str(config))
    # the same database, but an eventlog name nothing was migrated under
    runtime = runtime_on(tmp_path / "other", app_db, f"{app_db.eventlog}_none")
    try:
        with TestClient(operator_app(runtime)) as web:
            response = web.get("/")
    finally:
        runtime.stop()
    assert response.status_code == 200
    assert "Event pipeline" not in response.text and "data-handler" not in response.text
