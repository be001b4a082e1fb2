"""Dead-execution detection: which rows are dead, what the handlers do, and
the functional round trip with a real scheduler.

"Manual" schedulers are never started: the tests drive ``run_any_due_executions()`` and
``run_dead_execution_detection()`` themselves, with a :class:`SettableClock`.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    CancelDeadExecution,
    Execution,
    OnCompleteDoNothing,
    ReviveDeadExecution,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    SettableClock,
    TaskInstance,
    TaskInstanceId,
    Tasks,
)
from testsupport import EventRecorder, wait_until

#: the default dead threshold: heartbeat 5 min × 6 missed
DEFAULT_DEAD_AFTER = timedelta(minutes=30)


def _manual(
    engine: sa.Engine, clock: SettableClock, *tasks, recorder: EventRecorder | None = None
) -> Scheduler:
    builder = Scheduler.create(engine, *tasks).clock(clock).scheduler_name("manual")
    if recorder is not None:
        builder = builder.add_listener(recorder)
    return builder.build()


def _row(scheduler: SchedulerClient, task_name: str, instance_id: str) -> Execution | None:
    return scheduler.repository.get_execution(task_name, instance_id)


def _claim(scheduler: Scheduler, task_name: str, instance_id: str, heartbeat_at) -> Execution:
    """Claim the row as this scheduler's poller would, its last heartbeat at ``heartbeat_at``."""
    row = _row(scheduler, task_name, instance_id)
    assert row is not None
    picked = scheduler.repository.pick(row, heartbeat_at)
    assert picked is not None
    return picked


def _picked_elsewhere(scheduler: Scheduler, by: str, heartbeat, instance_id: str | None = None) -> None:
    """Mark rows (all, or one instance id) as claimed by another instance, as its claim writes."""
    d = scheduler.repository.dialect
    where = "" if instance_id is None else " WHERE task_instance = :id"
    with scheduler.repository.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE scheduled_tasks SET picked = :true, picked_by = :by, last_heartbeat = :hb, "
                f"version = version + 1{where}"
            ),
            {"true": d.encode_bool(True), "by": by, "hb": d.encode_time(heartbeat), "id": instance_id},
        )


class CountingHandler:
    """A dead-execution handler that counts its calls, then delegates."""

    def __init__(self, delegate) -> None:
        self.delegate = delegate
        self.calls: list[Execution] = []

    def dead_execution(self, complete, ops) -> None:
        self.calls.append(complete.execution)
        self.delegate.dead_execution(complete, ops)


class DoNothingOnFailure:
    def on_failure(self, complete, ops) -> None:
        return None


# --------------------------------------------------------------------------- DeadExecutionsTest
def test_dead_execution_is_revived_unpicked_and_due_again(engine, clock):
    ran = []
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: ran.append(instance.id))
    recorder = EventRecorder()
    scheduler = _manual(engine, clock, task, recorder=recorder)
    now = clock.now()
    scheduler.schedule(task.instance("1"), now - timedelta(days=1))
    _claim(scheduler, "one-time", "1", now - timedelta(hours=1))

    scheduler.run_dead_execution_detection()

    row = _row(scheduler, "one-time", "1")
    assert row is not None
    assert (row.picked, row.picked_by, row.last_heartbeat) == (False, None, None)
    # revived to "now" as a failure: version 1 insert, 2 claim, 3 revival
    assert (row.execution_time, row.last_failure, row.consecutive_failures, row.version) == (now, now, 1, 3)
    assert recorder.count(SchedulerEventType.DEAD_EXECUTION) == 1
    assert [(e.instance_id, e.version, e.picked_by) for e in recorder.dead] == [("1", 2, "manual")]
    assert scheduler.run_any_due_executions() == 1
    assert ran == ["1"]
    assert _row(scheduler, "one-time", "1") is None


def test_losing_the_race_to_revive_a_dead_execution_is_not_an_error(engine, clock, caplog):
    """Every instance sees the same dead row; the ones that lose the version check say so at
    INFO and count no unexpected error."""
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: None)

    class RevivedElsewhereFirst(EventRecorder):
        def on_execution_dead(self, execution):
            super().on_execution_dead(execution)
            with engine.begin() as conn:  # another instance's revival lands first
                conn.exec_driver_sql("UPDATE scheduled_tasks SET version = version + 1")

    recorder = RevivedElsewhereFirst()
    scheduler = _manual(engine, clock, task, recorder=recorder)
    now = clock.now()
    scheduler.schedule(task.instance("1"), now - timedelta(days=1))
    _claim(scheduler, "one-time", "1", now - timedelta(hours=1))

    scheduler.run_dead_execution_detection()

    assert recorder.count(SchedulerEventType.DEAD_EXECUTION) == 1
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0
    assert not [r for r in caplog.records if r.levelname == "ERROR" or r.exc_info]
    assert any("handled by another instance first" in r.getMessage() for r in caplog.records)


def test_dead_threshold_is_heartbeat_times_missed_limit_inclusive(engine, clock):
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: None)
    recorder = EventRecorder()
    scheduler = _manual(engine, clock, task, recorder=recorder)
    now = clock.now()
    scheduler.schedule_batch([task.instance("at-limit"), task.instance("just-inside")], now)
    _claim(scheduler, "one-time", "at-limit", now - DEFAULT_DEAD_AFTER)
    just_inside = _claim(
        scheduler, "one-time", "just-inside", now - DEFAULT_DEAD_AFTER + timedelta(milliseconds=1)
    )

    scheduler.run_dead_execution_detection()

    assert [e.instance_id for e in recorder.dead] == ["at-limit"]
    assert _row(scheduler, "one-time", "at-limit").picked is False
    assert _row(scheduler, "one-time", "just-inside") == just_inside


def test_dead_handler_runs_once_and_the_execution_runs_again(engine, clock):
    """DeadExecutionsTest (b): the handler throws and the failure handler does nothing, so the
    row stays picked; only dead detection brings it back."""
    executions = []

    def fail(instance, ctx):
        executions.append(ctx.execution.version)
        raise RuntimeError("boom")

    dead_handler = CountingHandler(ReviveDeadExecution())
    task = (
        Tasks.one_time("failing")
        .on_failure(DoNothingOnFailure())
        .on_dead_execution(dead_handler)
        .execute(fail)
    )
    scheduler = _manual(engine, clock, task)
    now = clock.now()
    clock.set(now - timedelta(hours=1))
    scheduler.schedule(task.instance("1"), clock.now())

    assert scheduler.run_any_due_executions() == 1
    assert executions == [2]
    assert _row(scheduler, "failing", "1").picked is True
    assert scheduler.run_any_due_executions() == 0
    assert executions == [2]

    clock.set(now)
    scheduler.run_dead_execution_detection()
    assert [e.version for e in dead_handler.calls] == [2]
    assert scheduler.run_any_due_executions() == 1
    assert executions == [2, 4]
    scheduler.run_dead_execution_detection()  # picked again a moment ago: not dead
    assert len(dead_handler.calls) == 1


def test_cancel_dead_execution_deletes_the_row(engine, clock):
    task = Tasks.one_time("cancel-me").on_dead_execution(CancelDeadExecution()).execute(lambda i, c: None)
    recorder = EventRecorder()
    scheduler = _manual(engine, clock, task, recorder=recorder)
    now = clock.now()
    scheduler.schedule(task.instance("1"), now - timedelta(days=1))
    _claim(scheduler, "cancel-me", "1", now - timedelta(hours=1))

    scheduler.run_dead_execution_detection()

    assert _row(scheduler, "cancel-me", "1") is None
    assert recorder.count(SchedulerEventType.DEAD_EXECUTION) == 1
    assert [(e.instance_id, e.version) for e in recorder.dead] == [("1", 2)]
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0


def test_dead_query_skips_null_heartbeats_and_unknown_task_names(engine, clock):
    task = Tasks.one_time("known").execute(lambda instance, ctx: None)
    recorder = EventRecorder()
    scheduler = _manual(engine, clock, task, recorder=recorder)
    now = clock.now()
    long_ago = now - timedelta(days=1)
    # rows written by some other instance that knows the task "ghost"
    other = SchedulerClient(engine, clock=clock)
    other.schedule_batch([TaskInstance("known", "null-heartbeat"), TaskInstance("known", "dead")], long_ago)
    other.schedule(TaskInstance("ghost", "dead"), long_ago)
    _picked_elsewhere(scheduler, "elsewhere", long_ago)
    _picked_elsewhere(scheduler, "elsewhere", None, instance_id="null-heartbeat")
    null_heartbeat = _row(scheduler, "known", "null-heartbeat")
    ghost = _row(scheduler, "ghost", "dead")
    assert null_heartbeat.picked and null_heartbeat.last_heartbeat is None
    assert ghost.picked and ghost.last_heartbeat == long_ago

    scheduler.run_dead_execution_detection()
    scheduler.run_dead_execution_detection()

    assert [e.key for e in recorder.dead] == [TaskInstanceId("known", "dead")]
    assert _row(scheduler, "known", "dead").picked is False
    assert _row(scheduler, "known", "null-heartbeat") == null_heartbeat
    assert _row(scheduler, "ghost", "dead") == ghost
    assert scheduler.repository.resolver.unresolved_names() == ("ghost",)
    assert recorder.count(SchedulerEventType.UNRESOLVED_TASK) == 1
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0


def test_dead_query_of_a_repository_lacking_the_task_returns_nothing_and_records_it_once(engine, clock):
    """JdbcTaskRepositoryTest.get_dead_executions_should_not_include_previously_unresolved."""
    scheduler = _manual(engine, clock, Tasks.one_time("known").execute(lambda i, c: None))
    SchedulerClient(engine, clock=clock).schedule(TaskInstance("ghost", "1"), clock.now())
    ghost = _row(scheduler, "ghost", "1")
    scheduler.repository.pick(ghost, clock.now() - timedelta(hours=1))

    assert scheduler.repository.get_dead_executions(clock.now()) == []
    assert scheduler.repository.resolver.unresolved_names() == ("ghost",)
    assert scheduler.repository.get_dead_executions(clock.now()) == []
    assert scheduler.repository.resolver.unresolved_names() == ("ghost",)


# --------------------------------------------------------------------------- functional
def test_completion_that_leaves_the_row_picked_is_revived_exactly_once(engine):
    """functional/DeadExecutionTest: poll 100 ms, heartbeat 100 ms (dead after 600 ms); the
    completion handler does nothing, so each run is found dead and revived."""

    class SnapshotAtSecondSuccess(EventRecorder):
        def __init__(self) -> None:
            super().__init__()
            self.dead_at_second_success: int | None = None
            self.second_success = threading.Event()

        def on_execution_complete(self, complete) -> None:
            super().on_execution_complete(complete)
            if len(self.successes()) == 2:
                self.dead_at_second_success = self.count(SchedulerEventType.DEAD_EXECUTION)
                self.second_success.set()

    recorder = SnapshotAtSecondSuccess()
    task = Tasks.custom("stays-picked").execute(lambda instance, ctx: OnCompleteDoNothing())
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=100))
        .heartbeat_interval(timedelta(milliseconds=100))
        .scheduler_name("functional")
        .add_listener(recorder)
        .build()
    )
    scheduler.schedule(task.instance("1"))
    scheduler.start()
    try:
        assert recorder.second_success.wait(30), "two successful runs"
    finally:
        scheduler.stop()
    assert recorder.dead_at_second_success == 1
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0
    assert [c.execution.version for c in recorder.successes()[:2]] == [2, 4]


def test_dead_detection_revives_rows_picked_by_a_vanished_instance_in_a_running_scheduler(engine):
    """The housekeeper does it on its own, every 2 × heartbeat, without being driven."""
    recorder = EventRecorder()
    ran = []
    task = Tasks.one_time("orphan").execute(lambda instance, ctx: ran.append(ctx.execution.version))
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=50))
        .heartbeat_interval(timedelta(milliseconds=100))
        .missed_heartbeats_limit(4)
        .scheduler_name("survivor")
        .add_listener(recorder)
        .build()
    )
    scheduler.schedule(task.instance("1"))
    # claimed by an instance that died right away: picked, last heartbeat = claim time
    _picked_elsewhere(scheduler, "vanished", scheduler.clock.now())
    scheduler.start()
    try:
        wait_until(lambda: ran, timeout=30, message="the orphan revived and run")
    finally:
        scheduler.stop()
    assert ran == [4]
    assert [(e.picked_by, e.version) for e in recorder.dead] == [("vanished", 2)]
    assert _row(scheduler, "orphan", "1") is None


# --------------------------------------------------------------------------- a row held locked
@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_a_dead_row_locked_by_a_frozen_writer_does_not_stop_the_others_being_revived(engine, clock, caplog):
    """A process frozen between its heartbeat's UPDATE and COMMIT keeps that row locked until
    its connection dies. The pass gives up on that row after a bounded wait, revives the rest,
    and revives the locked one on a later pass once the lock is gone."""
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: None)
    scheduler = _manual(engine, clock, task)
    now = clock.now()
    for instance in ("frozen", "free"):
        scheduler.schedule(task.instance(instance), now - timedelta(days=1))
        _claim(scheduler, "one-time", instance, now - timedelta(hours=1))
    frozen = engine.connect()
    frozen.execute(  # the frozen owner's heartbeat: written, never committed
        sa.text(
            "UPDATE scheduled_tasks SET last_heartbeat = last_heartbeat WHERE task_name = 'one-time' AND task_instance = 'frozen'"
        )
    )
    try:
        passed = threading.Event()
        detection = threading.Thread(
            target=lambda: (scheduler.run_dead_execution_detection(), passed.set()), daemon=True
        )
        detection.start()
        # bounded: REVIVE_LOCK_WAIT (2 s, whole seconds on MySQL) for the locked row, not the
        # server's own wait (50 s a try on MySQL, forever on PostgreSQL)
        assert passed.wait(timeout=20), "the detection pass waited on the locked row"
        free = _row(scheduler, "one-time", "free")
        assert free is not None and (free.picked, free.version) == (False, 3)
        assert any("is locked by another transaction" in r.getMessage() for r in caplog.records)
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        frozen.rollback()
        frozen.close()
    locked = _row(scheduler, "one-time", "frozen")
    assert locked is not None and (locked.picked, locked.version) == (True, 2)

    scheduler.run_dead_execution_detection()

    revived = _row(scheduler, "one-time", "frozen")
    assert revived is not None and (revived.picked, revived.version) == (False, 3)
    # the bounded wait was the pass's own: the pool's sessions wait as the server says again
    if engine.dialect.name != "postgresql":
        with engine.connect() as conn:
            session, server = conn.exec_driver_sql(
                "SELECT @@SESSION.innodb_lock_wait_timeout, @@GLOBAL.innodb_lock_wait_timeout"
            ).one()
        assert session == server, (session, server)
