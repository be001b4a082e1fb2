"""The engine across real OS processes: every execution exactly once, heartbeats, dead-execution
revival and fencing.

Each scheduler runs in its own child process (``testsupport/scheduler_process.py``) against one
shared database; the children report what they executed and which events they saw, and the
tests read the table itself. Every child is killed on the way out, whatever happens.
"""

from __future__ import annotations

import collections
import itertools
import re
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import Execution, SchedulerClient, TaskInstance
from testsupport import IsolatedDatabase, wait_until
from testsupport.scheduler_process import (
    BAIL_OUT_FRACTION,
    CLUSTER_TASK,
    LONG_TASK,
    RECURRING_TASK,
    SchedulerProcess,
    scheduler_processes,
)

pytestmark = pytest.mark.cluster

EXECUTIONS = 10_000
#: db-scheduler's own cluster test accepts after 30 s; the machine is shared with other test runs, so wait longer
#: (the assertions stay exact)
CLUSTER_DEADLINE = 120.0
RECURRING_RUN_SECONDS = 5.0

#: crash and stale-owner scenarios: dead after 200 ms × 4 = 800 ms without a heartbeat
HB_MS = 200
MISSED_LIMIT = 4
DEAD_AFTER_NS = HB_MS * MISSED_LIMIT * 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _row(engine: sa.Engine, task: str, instance_id: str) -> Execution | None:
    return SchedulerClient(engine).repository.get_execution(task, instance_id)


def _count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar_one()


def _errors_logged(stderr: str) -> str:
    """The child's ERROR/WARNING lines and exception lines, counted (timestamps and ids cut)."""
    counts = collections.Counter(
        re.sub(r"\d+", "#", line.split(" ", 2)[-1])[:200]
        for line in stderr.splitlines()
        if " ERROR " in line or " WARNING " in line or re.match(r"^[\w.]+(Error|Exception): ", line)
    )
    return "\n".join(f"{n:5d} {line}" for line, n in counts.most_common(25))


def _no_trouble(name: str, report: dict) -> None:
    events = report["events"]
    for event in (
        "UNEXPECTED_ERROR",
        "DEAD_EXECUTION",
        "FAILED_MULTIPLE_HEARTBEATS",
        "COMPLETIONHANDLER_ERROR",
    ):
        assert events.get(event, 0) == 0, (
            f"{name}: {event} x{events.get(event)}; all events {events}\n{_errors_logged(report['stderr'])}"
        )
    assert report["failed"] == [], f"{name} had failed executions: {report['failed'][:10]}"
    assert report["executing_after_stop"] == 0, f"{name} still executing after stop"


# --------------------------------------------------------------------------- concurrency
def _each_runs_once(
    database: IsolatedDatabase,
    engine: sa.Engine,
    processes: int,
    executions: int,
    schedule: Callable[[list[TaskInstance]], None],
    *,
    busy_processes: int,
    **options: object,
) -> dict[str, dict]:
    """Start the processes, ``schedule`` the executions, wait until all are done; each ran
    exactly once, and at least ``busy_processes`` processes ran some. The processes' reports."""
    options = {"threads": 10, "poll_ms": 50, "hb_ms": 500, **options}
    with scheduler_processes() as procs:
        for i in range(1, processes + 1):
            procs.append(SchedulerProcess(database.url, f"scheduler{i}", "cluster", **options))
        for proc in procs:
            proc.start()
        schedule([TaskInstance(CLUSTER_TASK, str(i)) for i in range(1, executions + 1)])
        wait_until(
            lambda: _count(engine) == 0,
            timeout=CLUSTER_DEADLINE,
            interval=0.1,
            message=f"all {executions} executions completed and removed",
        )
        reports = {proc.name: proc.stop() for proc in procs}

    for name, report in reports.items():
        _no_trouble(name, report)
    busy = [name for name, report in reports.items() if report["ok"]]
    assert len(busy) >= busy_processes, f"only {busy} executed anything: not a cluster test"
    ok = [i for report in reports.values() for i in report["ok"]]
    assert len(ok) == executions, f"{len(ok) - len(set(ok))} executions ran more than once"
    assert set(ok) == {str(i) for i in range(1, executions + 1)}
    return reports


def _concurrency(database: IsolatedDatabase, engine: sa.Engine, **options: object) -> None:
    def in_one_batch(instances: list[TaskInstance]) -> None:
        assert SchedulerClient(engine).schedule_batch(instances) == EXECUTIONS

    _each_runs_once(database, engine, 2, EXECUTIONS, in_one_batch, busy_processes=2, **options)


@pytest.mark.slow
@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_fetch_two_processes_run_10000_executions_exactly_once(database, engine):
    _concurrency(database, engine, strategy="fetch")


@pytest.mark.slow
@pytest.mark.dialects("postgres", "mariadb")
def test_lock_and_fetch_two_processes_run_10000_executions_exactly_once(database, engine):
    _concurrency(database, engine, strategy="lock_and_fetch", lower=5.0, upper=10.0)


def test_default_strategy_two_processes_run_10000_executions_exactly_once(database, engine):
    """No ``poll_using_…``: sized lock-and-fetch where the server has SKIP LOCKED, fetch on SQLite."""
    _concurrency(database, engine, strategy="default")


@pytest.mark.dialects("postgres")
@pytest.mark.parametrize("strategy", ["fetch", "lock_and_fetch"])
def test_due_now_schedules_claimed_from_notifications_run_exactly_once(database, engine, strategy):
    """Three processes hear every notification and race to claim the execution it names (or,
    with both threads busy, wake their pollers): each of 300 executions scheduled one at a
    time runs once. Polling every 30 s, so the notifications drive everything."""
    client = SchedulerClient(engine)

    def one_at_a_time_due_now(instances: list[TaskInstance]) -> None:
        for instance in instances:
            client.schedule(instance, datetime.now(UTC))

    reports = _each_runs_once(
        database,
        engine,
        3,
        300,
        one_at_a_time_due_now,
        busy_processes=2,
        strategy=strategy,
        threads=2,
        poll_ms=30_000,
    )
    claimed = {name: report["events"].get("RAN_CLAIM_NOTIFIED", 0) for name, report in reports.items()}
    assert sum(claimed.values()) > 0, f"no execution was claimed from its notification: {claimed}"


# --------------------------------------------------------------------------- recurring
@pytest.mark.slow
def test_recurring_task_shared_by_two_processes_never_overlaps(database, engine):
    with scheduler_processes() as procs:
        for i in (1, 2):
            procs.append(
                SchedulerProcess(
                    database.url, f"scheduler{i}", "recurring", threads=10, poll_ms=50, hb_ms=500
                )
            )
        for proc in procs:
            proc.expect("built", 60)
        # both insert the recurring row on start-up at the same moment: the insert race
        for proc in procs:
            proc.send("start")
        for proc in procs:
            proc.expect("started", 60)
        time.sleep(RECURRING_RUN_SECONDS)  # the scenario's running time, not a wait for an outcome
        reports = {proc.name: proc.stop() for proc in procs}

    for name, report in reports.items():
        _no_trouble(name, report)
    runs = sorted(
        (started, ended, version, name)
        for name, report in reports.items()
        for started, ended, version in report["runs"]
    )
    assert len(runs) >= 20, f"only {len(runs)} runs in {RECURRING_RUN_SECONDS}s"
    for before, after in itertools.pairwise(runs):
        assert after[0] >= before[1], f"two runs of the one slot overlap: {before} and {after}"
    # insert at version 1; each run claims (+1) and reschedules (+1): run k holds version 2k
    assert [version for _, _, version, _ in runs] == list(range(2, 2 * len(runs) + 1, 2))
    row = _row(engine, RECURRING_TASK, "recurring")
    assert row is not None
    assert (row.picked, row.picked_by, row.version) == (False, None, 2 * len(runs) + 1)


# --------------------------------------------------------------------------- crash and stale owner
def _victim_running(
    database: IsolatedDatabase, engine: sa.Engine, procs: list[SchedulerProcess]
) -> Execution:
    """Start ``victim``, which schedules and picks the long-running execution; return the row once
    the victim has heartbeated it at least once after the claim. Then start ``rescuer``."""
    options = {
        "threads": 2,
        "poll_ms": 50,
        "hb_ms": HB_MS,
        "missed_limit": MISSED_LIMIT,
        "shutdown_wait_ms": 2000,
    }
    victim = SchedulerProcess(database.url, "victim", "victim", **options)
    procs.append(victim)
    victim.start()
    started = victim.expect("handler_started", 60)
    assert started["version"] == 2
    claimed = _row(engine, LONG_TASK, "recurring")
    assert claimed is not None and claimed.picked_by == "victim"
    wait_until(
        lambda: _row(engine, LONG_TASK, "recurring").last_heartbeat > claimed.last_heartbeat,
        timeout=30,
        message="a heartbeat after the claim",
    )
    rescuer = SchedulerProcess(database.url, "rescuer", "rescuer", **options)
    procs.append(rescuer)
    rescuer.start()
    return claimed


def _revived_and_completed_by_rescuer(engine: sa.Engine, rescuer: SchedulerProcess) -> Execution:
    # version: 1 insert, 2 victim's claim, 3 revival, 4 rescuer's claim, 5 rescuer's reschedule
    assert rescuer.expect("handler_started", 60)["version"] == 4
    return wait_until(
        lambda: (row := _row(engine, LONG_TASK, "recurring")) is not None and row.version == 5 and row,
        timeout=30,
        message="the rescuer's completion written",
    )


def _assert_completed_by_rescuer(row: Execution, rescuer_report: dict, claimed: Execution) -> None:
    assert (row.picked, row.picked_by, row.version) == (False, None, 5)
    # the revival counted as a failure, the rescuer's run as a success after it
    assert row.consecutive_failures == 0
    assert row.last_failure is not None and row.last_success is not None
    assert row.last_failure <= row.last_success
    assert row.execution_time - row.last_success == timedelta(hours=1)
    [dead] = rescuer_report["dead"]
    assert (dead["picked_by"], dead["version"]) == ("victim", 2)
    assert rescuer_report["events"].get("DEAD_EXECUTION") == 1
    assert [version for _, version in rescuer_report["runs"]] == [4]
    # the victim had heartbeated after its claim, and was revived only once silent for
    # heartbeat × limit
    last_heartbeat = datetime.fromisoformat(dead["last_heartbeat"])
    assert last_heartbeat > claimed.last_heartbeat
    assert dead["detected_ns"] - _ns(last_heartbeat) >= DEAD_AFTER_NS


def _ns(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(microseconds=1) * 1000


def test_killed_process_execution_is_revived_elsewhere_and_completes(database, engine):
    with scheduler_processes() as procs:
        claimed = _victim_running(database, engine, procs)
        victim, rescuer = procs
        victim.signal(signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
        row = _revived_and_completed_by_rescuer(engine, rescuer)
        report = rescuer.stop()

    assert report["events"].get("UNEXPECTED_ERROR", 0) == 0, report["events"]
    assert report["executing_after_stop"] == 0
    _assert_completed_by_rescuer(row, report, claimed)


def test_stopped_process_cannot_record_its_result_after_being_taken_over(database, engine):
    with scheduler_processes() as procs:
        claimed = _victim_running(database, engine, procs)
        victim, rescuer = procs
        # stop it just after a heartbeat committed, so that it is not frozen inside a write
        # transaction (holding a row lock, or SQLite's write lock) for the next ~200 ms
        beat = _row(engine, LONG_TASK, "recurring").last_heartbeat
        wait_until(
            lambda: _row(engine, LONG_TASK, "recurring").last_heartbeat > beat,
            timeout=30,
            interval=0.002,
            message="a heartbeat",
        )
        victim.signal(signal.SIGSTOP)
        row = _revived_and_completed_by_rescuer(engine, rescuer)
        resumed_ns = time.time_ns()
        victim.signal(signal.SIGCONT)
        bailed = victim.expect("bailing_out", 60)
        victim.expect("scheduler_event", 60, type="COMPLETIONHANDLER_ERROR")
        after = _row(engine, LONG_TASK, "recurring")
        rescuer_report = rescuer.stop()
        victim_report = victim.stop()

    # the stale owner's completion wrote nothing: the row is exactly as the rescuer left it
    assert after == row
    _assert_completed_by_rescuer(row, rescuer_report, claimed)
    assert rescuer_report["events"].get("UNEXPECTED_ERROR", 0) == 0, rescuer_report["events"]
    assert bailed["version"] == 2 and bailed["failed_heartbeats"] >= 1
    assert victim_report["events"].get("COMPLETIONHANDLER_ERROR") == 1
    assert victim_report["events"].get("FAILED_HEARTBEAT", 0) >= 1
    assert victim_report["executing_after_stop"] == 0

    # what the victim's handler saw of its own heartbeat state
    # (each observation is [time before reading, fraction_dead, failed_heartbeats, time after])
    observations = victim_report["observations"]
    first_after = next(o for o in observations if o[0] >= resumed_ns)
    assert first_after[1] >= 1.0, f"after the stop it was dead for the whole threshold: {first_after}"
    _, fraction, _, at_latest_ns = next(o for o in observations if o[1] > BAIL_OUT_FRACTION)
    # fraction_dead grows linearly from the last successful heartbeat: when it passed 0.5
    crossed_half_ns = at_latest_ns - (fraction - BAIL_OUT_FRACTION) * DEAD_AFTER_NS
    [dead] = rescuer_report["dead"]
    assert crossed_half_ns < dead["detected_ns"], "fraction_dead passed 0.5 before the takeover"


def test_schedule_if_not_exists_that_loses_the_insert_race_reports_existing(engine):
    """The start-up insert race, made deterministic: the caller's transaction already holds a
    snapshot (REPEATABLE READ on MySQL/MariaDB) from before another instance inserted the row,
    so re-reading after the duplicate-key error cannot see the winner's row."""
    task = TaskInstance(RECURRING_TASK, "recurring")
    client = SchedulerClient(engine)
    with engine.connect() as mine:
        mine.begin()
        assert client.repository.get_execution(RECURRING_TASK, "recurring", connection=mine) is None
        assert client.schedule_if_not_exists(task) is True  # another instance, committed
        assert client.schedule_if_not_exists(task, connection=mine) is False
        mine.rollback()
    assert _count(engine) == 1
