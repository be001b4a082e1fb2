"""Claiming an execution from the notification that named it (scheduler/_polling/notified_claims.py).

PostgreSQL only, as notifications are. The poller is set to 30 s, so only the notification
path (or a poll it falls back to, which the listener events count) can start a task promptly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from scheduler_repositories import notifying_repository
from sqlalchemy import event

from ekbatan.distributed_jobs.scheduler import (
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Tasks,
    create_table,
)
from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from testsupport import EventRecorder, wait_until

pytestmark = pytest.mark.dialects("postgres")

POLLING = timedelta(seconds=30)
POLLS = SchedulerEventType.RAN_EXECUTE_DUE
NOTIFIED_CLAIMS = SchedulerEventType.RAN_CLAIM_NOTIFIED


def _scheduler(
    engine: sa.Engine,
    strategy: str,
    *tasks,
    threads: int = 4,
    recorder: EventRecorder,
    priority: bool = False,
):
    builder = (
        Scheduler.create(engine, *tasks)
        .threads(threads)
        .polling_interval(POLLING)
        .add_listener(recorder)
        .enable_priority(priority)
    )
    builder = (
        builder.poll_using_lock_and_fetch() if strategy == "lock_and_fetch" else builder.poll_using_fetch()
    )
    return builder.build()


def _from_elsewhere(database, task, instance_id: str, at: datetime | None = None) -> None:
    """Schedule (due now, unless ``at``) from another engine, as another process would: only
    the notification tells the scheduler."""
    elsewhere = sa.create_engine(database.url)
    try:
        SchedulerClient(elsewhere, [task]).schedule(task.instance(instance_id), at or datetime.now(UTC))
    finally:
        elsewhere.dispose()


def _row(engine: sa.Engine, instance_id: str):
    return SchedulerClient(engine).repository.get_execution("t", instance_id)


def _warmed_up(scheduler: Scheduler, engine: sa.Engine, ran: dict, recorder: EventRecorder) -> int:
    """Start, let the first poll run one execution (both strategies count a poll that found
    work), and return the poll count from then on."""
    scheduler.start()
    wait_until(lambda: scheduler._listener.listening.is_set(), timeout=10, message="listening")
    wait_until(lambda: "warm-up" in ran, timeout=10, message="the first poll ran the warm-up row")
    wait_until(lambda: _row(engine, "warm-up") is None, timeout=10, message="warm-up completed")
    return recorder.count(POLLS)


def _recording_task(ran: dict, gate: threading.Event | None = None):
    def body(instance, ctx):
        ran[instance.id] = threading.current_thread().name
        if gate is not None and instance.id == "blocker":
            assert gate.wait(30)

    return Tasks.one_time("t").execute(body)


@dataclass
class Running:
    ran: dict[str, str]
    task: object
    recorder: EventRecorder
    polls: int  # polls counted once the warm-up ran


@contextmanager
def _running(
    engine: sa.Engine,
    strategy: str = "fetch",
    *,
    threads: int = 4,
    priority: bool = False,
    gate: threading.Event | None = None,
) -> Iterator[Running]:
    """A started scheduler of task ``t`` whose first poll has run one warm-up execution."""
    ran: dict[str, str] = {}
    task = _recording_task(ran, gate)
    recorder = EventRecorder()
    scheduler = _scheduler(engine, strategy, task, threads=threads, recorder=recorder, priority=priority)
    _insert_due(engine, task, "warm-up")
    try:
        yield Running(ran, task, recorder, _warmed_up(scheduler, engine, ran, recorder))
    finally:
        if gate is not None:
            gate.set()
        scheduler.stop()


def _insert_due(engine: sa.Engine, task, instance_id: str) -> None:
    SchedulerClient(engine, [task]).schedule(
        task.instance(instance_id), datetime.now(UTC) - timedelta(seconds=1)
    )


@pytest.mark.parametrize("strategy", ["fetch", "lock_and_fetch"])
def test_a_notified_execution_runs_without_a_poll(database, engine, strategy):
    with _running(engine, strategy) as it:
        for i in range(3):
            _from_elsewhere(database, it.task, f"n{i}")
            wait_until(
                lambda i=i: f"n{i}" in it.ran, timeout=5, message=f"n{i} started long before the next poll"
            )
        wait_until(lambda: all(_row(engine, f"n{i}") is None for i in range(3)), timeout=10)
        assert it.recorder.count(POLLS) == it.polls, "the notification itself claimed them: no poll ran"
        assert it.recorder.count(NOTIFIED_CLAIMS) == 3
        wait_until(lambda: len(it.recorder.successes()) == 4, timeout=5, message="listeners told of each")


def test_with_priority_on_a_notification_wakes_the_poller_instead(database, engine):
    with _running(engine, priority=True) as it:
        _from_elsewhere(database, it.task, "ordered")
        wait_until(lambda: "ordered" in it.ran, timeout=5, message="run by the poll the notification woke")
        assert it.recorder.count(POLLS) > it.polls
        assert it.recorder.count(NOTIFIED_CLAIMS) == 0, "an announced row must not jump the priority order"


def test_a_notification_of_a_future_execution_sets_a_timer_instead(database, engine):
    with _running(engine) as it:
        due = datetime.now(UTC) + timedelta(milliseconds=300)
        _from_elsewhere(database, it.task, "soon", at=due)
        wait_until(
            lambda: "soon" in it.ran, timeout=5, message="run at its due time, long before the next poll"
        )
        assert datetime.now(UTC) >= due
        assert it.recorder.count(POLLS) > it.polls
        assert it.recorder.count(NOTIFIED_CLAIMS) == 0


def test_a_failing_claim_falls_back_to_the_poller_and_the_listener_carries_on(database, engine):
    """A real error from the server: a trigger refuses the first claim only."""
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SEQUENCE claim_attempts"))
        conn.execute(
            sa.text(
                "CREATE FUNCTION refuse_first_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.picked AND nextval('claim_attempts') = 2 THEN RAISE EXCEPTION 'claim refused'; END IF; "
                "RETURN NEW; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER refuse_first_claim BEFORE UPDATE ON scheduled_tasks "
                "FOR EACH ROW EXECUTE FUNCTION refuse_first_claim()"
            )
        )
    with _running(engine) as it:  # the warm-up's claim is attempt 1
        _from_elsewhere(database, it.task, "refused")
        wait_until(lambda: "refused" in it.ran, timeout=5, message="the poller ran what the claim could not")
        assert it.recorder.count(POLLS) > it.polls
        assert it.recorder.count(NOTIFIED_CLAIMS) == 0
        _from_elsewhere(database, it.task, "next")
        wait_until(lambda: "next" in it.ran, timeout=5, message="the listener still claims")
        assert it.recorder.count(NOTIFIED_CLAIMS) == 1


def test_a_busy_pool_leaves_the_notified_execution_to_the_poller(database, engine):
    gate = threading.Event()
    with _running(engine, threads=1, gate=gate) as it:
        _from_elsewhere(database, it.task, "blocker")
        wait_until(lambda: "blocker" in it.ran, timeout=5, message="the blocker runs on the only thread")
        polls = it.recorder.count(POLLS)
        _from_elsewhere(database, it.task, "waiting")
        wait_until(
            lambda: it.recorder.count(POLLS) > polls, timeout=5, message="the poller was woken instead"
        )
        waiting = _row(engine, "waiting")
        assert waiting is not None and not waiting.picked, "no claim while no worker is free"
        gate.set()
        wait_until(
            lambda: "waiting" in it.ran, timeout=10, message="the polled candidate ran once a thread was free"
        )


def test_a_scheduler_without_the_task_leaves_it_to_one_that_has_it(database, engine):
    ran: dict[str, str] = {}
    task = _recording_task(ran)
    other = Tasks.one_time("other").execute(lambda instance, ctx: ran.setdefault(instance.id, "other"))
    recorder = EventRecorder()
    stranger = _scheduler(engine, "fetch", other, recorder=recorder)
    _insert_due(engine, other, "warm-up")
    try:
        polls = _warmed_up(stranger, engine, ran, recorder)
        _from_elsewhere(database, task, "mine")
        wait_until(
            lambda: recorder.count(POLLS) > polls, timeout=5, message="the stranger fell back to its poller"
        )
        mine = _row(engine, "mine")
        assert mine is not None and not mine.picked, "a scheduler must not claim a task it cannot run"
    finally:
        stranger.stop()
    owner_recorder = EventRecorder()
    with _scheduler(engine, "fetch", task, recorder=owner_recorder):
        wait_until(lambda: "mine" in ran, timeout=10, message="the scheduler that knows the task runs it")


def test_watched_statements_fall_back_to_the_poller_so_tracing_sees_every_claim(database):
    engine = database.engine()
    create_table(engine)
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_a: seen.append(statement))
    ran: dict[str, str] = {}
    task = _recording_task(ran)
    recorder = EventRecorder()
    scheduler = _scheduler(engine, "fetch", task, recorder=recorder)
    _insert_due(engine, task, "warm-up")
    try:
        polls = _warmed_up(scheduler, engine, ran, recorder)
        seen.clear()
        _from_elsewhere(database, task, "traced")
        wait_until(lambda: "traced" in ran, timeout=5, message="ran after the poller was woken")
        assert recorder.count(POLLS) > polls
        claims = [s for s in seen if s.startswith("UPDATE") and "SET picked = " in s]
        assert claims, f"the claim went past the cursor listener: {seen}"
    finally:
        scheduler.stop()
        engine.dispose()


def test_claim_notified_takes_only_a_due_unpicked_row(engine):
    task = Tasks.one_time("t").execute(lambda instance, ctx: None)
    repo = notifying_repository(engine, [task], "notified")
    assert repo.claims_notified
    now = datetime.now(UTC)
    repo.create_batch(
        [
            NewExecution("t", "due", now - timedelta(seconds=1), None, None),
            NewExecution("t", "later", now + timedelta(hours=1), None, None),
        ]
    )
    raw = engine.raw_connection()
    try:
        connection = raw.driver_connection
        connection.autocommit = True
        claimed = repo.claim_notified(TaskInstanceId("t", "due"), now, connection)
        assert claimed is not None
        assert (claimed.picked, claimed.picked_by, claimed.version) == (True, "notified", 2)
        assert claimed.last_heartbeat == now
        stored = repo.get_execution("t", "due")
        assert (stored.picked, stored.version) == (True, 2)
        assert repo.claim_notified(TaskInstanceId("t", "due"), now, connection) is None, "already picked"
        assert repo.claim_notified(TaskInstanceId("t", "later"), now, connection) is None, "not due yet"
        assert not repo.get_execution("t", "later").picked
        assert repo.claim_notified(TaskInstanceId("t", "absent"), now, connection) is None

        # Giving back a claim whose reply was lost: only the claim made at that instant.
        later = now + timedelta(microseconds=1)
        assert repo.release_notified(TaskInstanceId("t", "due"), later) is False
        assert repo.release_notified(TaskInstanceId("t", "due"), now) is True
        released = repo.get_execution("t", "due")
        assert (released.picked, released.picked_by, released.last_heartbeat, released.version) == (
            False,
            None,
            None,
            3,
        )
        assert repo.release_notified(TaskInstanceId("t", "due"), now) is False
    finally:
        raw.close()
