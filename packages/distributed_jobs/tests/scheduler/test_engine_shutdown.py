"""Shutdown: two phases of ``shutdown_max_wait``, what is left behind in the table,
heartbeats until the workers have drained, cancelling ``async def`` bodies, and the opt-in
exit hook that installs no signal handler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    Execution,
    OnFailureRetryLater,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Schedules,
    TaskInstance,
    Tasks,
)
from testsupport import EventRecorder, wait_until
from testsupport.scheduler_process import HOOK_TASK, SchedulerProcess, scheduler_processes

SHORT_WAIT = timedelta(milliseconds=300)


class Gate:
    """A handler that reports it started, then waits to be released (only on ``blocking_on``)."""

    def __init__(self, blocking_on: str | None = None) -> None:
        self.blocking_on = blocking_on
        self.started = threading.Event()
        self.release = threading.Event()
        self.ran: list[tuple[str, str, int]] = []
        self.finished = threading.Event()

    def __call__(self, instance, ctx) -> None:
        name = ctx.execution.picked_by
        self.ran.append((name, instance.id, ctx.execution.version))
        if self.blocking_on in (None, name):
            self.started.set()
            self.release.wait(60)
            self.finished.set()


def _scheduler(engine: sa.Engine, *tasks, name: str = "stopping", recorder=None, **options) -> Scheduler:
    builder = (
        Scheduler.create(engine, *tasks)
        .scheduler_name(name)
        .polling_interval(options.pop("polling", timedelta(milliseconds=50)))
        .heartbeat_interval(options.pop("heartbeat", timedelta(milliseconds=100)))
        .missed_heartbeats_limit(options.pop("missed", 4))
        .shutdown_max_wait(options.pop("shutdown_max_wait", timedelta(seconds=30)))
    )
    if recorder is not None:
        builder = builder.add_listener(recorder)
    for option, args in options.items():
        builder = getattr(builder, option)(*args)
    return builder.build()


def _stop_in_background(scheduler: Scheduler) -> threading.Thread:
    thread = threading.Thread(target=scheduler.stop, name="test-stop", daemon=True)
    thread.start()
    wait_until(lambda: scheduler.is_shutting_down, timeout=10, message="shutdown begun")
    return thread


def _row(scheduler: Scheduler, task: str, instance_id: str) -> Execution | None:
    return scheduler.repository.get_execution(task, instance_id)


# --------------------------------------------------------------------------- phase one
def test_stop_waits_for_running_executions_and_keeps_heartbeating_until_they_finish(engine):
    gate = Gate()
    task = Tasks.recurring("long", Schedules.fixed_delay(timedelta(hours=1))).execute(gate)
    recorder = EventRecorder()
    # a first phase of ten minutes: a stop() that ends within the deadline below ended because
    # the execution finished, not because the phase ran out
    scheduler = _scheduler(
        engine, task, recorder=recorder, start_tasks=(task,), shutdown_max_wait=timedelta(minutes=10)
    )
    scheduler.start()
    try:
        assert gate.started.wait(30)
        stop_began = scheduler.clock.now()
        stopping = _stop_in_background(scheduler)
        beats = recorder.count(SchedulerEventType.RAN_UPDATE_HEARTBEATS)
        # still heartbeating while the worker drains: the row's heartbeat moves past the stop
        wait_until(
            lambda: (
                recorder.count(SchedulerEventType.RAN_UPDATE_HEARTBEATS) >= beats + 2
                and _row(scheduler, "long", "recurring").last_heartbeat > stop_began
            ),
            timeout=30,
            message="heartbeats during the shutdown wait",
        )
        assert stopping.is_alive(), "stop() returned while an execution was running"
        assert scheduler.is_started
    finally:
        gate.release.set()
    stopping.join(60)
    assert not stopping.is_alive(), "stop() outlived the execution it waited for"
    row = _row(scheduler, "long", "recurring")
    # completed normally during the shutdown: rescheduled an hour after it finished
    assert (row.picked, row.picked_by, row.version, row.consecutive_failures) == (False, None, 3, 0)
    assert row.execution_time == row.last_success + timedelta(hours=1)
    assert recorder.count(SchedulerEventType.FAILED_HEARTBEAT) == 0
    assert scheduler.get_currently_executing() == []
    assert not scheduler.is_started


def test_queued_fetch_candidates_are_skipped_and_left_unpicked(engine):
    gate = Gate()
    task = Tasks.one_time("queued").execute(gate)
    # one worker, fetch limits (0.5, 3.0): one poll queues three candidates
    scheduler = _scheduler(engine, task, threads=(1,), polling=timedelta(seconds=30))
    now = scheduler.clock.now()
    scheduler.schedule_batch(
        (task.instance(name), now - timedelta(seconds=3 - i))
        for i, name in enumerate(("first", "second", "third"))
    )
    untouched = {i: _row(scheduler, "queued", i) for i in ("second", "third")}
    scheduler.start()
    try:
        assert gate.started.wait(30)
        stopping = _stop_in_background(scheduler)
    finally:
        gate.release.set()
    stopping.join(30)
    assert not stopping.is_alive()
    assert gate.ran == [("stopping", "first", 2)]
    assert _row(scheduler, "queued", "first") is None
    for instance_id, before in untouched.items():
        after = _row(scheduler, "queued", instance_id)
        assert after == before and (after.picked, after.version) == (False, 1)


# --------------------------------------------------------------------------- both phases
def test_execution_outliving_both_phases_is_abandoned_picked_and_revived_elsewhere(engine):
    gate = Gate(blocking_on="first")
    task = Tasks.one_time("stubborn").execute(gate)
    first_events, second_events = EventRecorder(), EventRecorder()
    # the first instance's own detector looks with a 2 s window: on a loaded machine a stall of
    # its heartbeats longer than 400 ms would otherwise let it revive its own running execution
    # during the stop; the second finds the row dead with its own 400 ms window
    first = _scheduler(
        engine, task, name="first", recorder=first_events, shutdown_max_wait=SHORT_WAIT, missed=20
    )
    second = _scheduler(engine, task, name="second", recorder=second_events)
    first.schedule(task.instance("1"))
    first.start()
    try:
        assert gate.started.wait(30)
        started = time.monotonic()
        first.stop()
        took = time.monotonic() - started
        # waited the first phase, interrupted (nothing to interrupt in a thread), waited again,
        # then returned with the execution still running (it waits a minute to be released)
        assert took >= 2 * SHORT_WAIT.total_seconds()
        [abandoned] = first.get_currently_executing()
        assert not gate.finished.is_set()
        row = _row(first, "stubborn", "1")
        assert (row.picked, row.picked_by, row.version) == (True, "first", 2)

        # another instance finds it dead (heartbeat 100 ms × 4) and runs it
        second.start()
        wait_until(
            lambda: _row(first, "stubborn", "1") is None, timeout=30, message="revived and run elsewhere"
        )
        assert second_events.count(SchedulerEventType.DEAD_EXECUTION) == 1
        assert [(e.picked_by, e.version) for e in second_events.dead] == [("first", 2)]
        assert ("second", "1", 4) in gate.ran
    finally:
        gate.release.set()
        second.stop()
    # the abandoned thread finally returns: its completion matches no row
    wait_until(
        lambda: first_events.count(SchedulerEventType.COMPLETIONHANDLER_ERROR) == 1,
        timeout=30,
        message="the abandoned execution's completion refused",
    )
    wait_until(lambda: first.get_currently_executing() == [], timeout=30, message="abandoned thread done")
    assert abandoned.execution.version == 2


@pytest.mark.dialects("postgres", "mariadb")
def test_lock_and_fetch_rows_queued_at_shutdown_are_given_back_and_the_abandoned_one_revived(engine):
    gate = Gate(blocking_on="first")
    task = Tasks.one_time("claimed").execute(gate)
    first_events, second_events = EventRecorder(), EventRecorder()
    # one worker; lock-and-fetch (0.5, 3.0) claims three rows in one go. The abandoned running
    # row's heartbeat stops: the first instance's own detector must not find it dead during its
    # shutdown (dead after 100 ms × 40 there), the second's does at once (100 ms × 4).
    first = _scheduler(
        engine,
        task,
        name="first",
        recorder=first_events,
        shutdown_max_wait=SHORT_WAIT,
        missed=40,
        threads=(1,),
        poll_using_lock_and_fetch=(0.5, 3.0),
        polling=timedelta(seconds=30),
    )
    second = _scheduler(engine, task, name="second", recorder=second_events)
    now = first.clock.now()
    first.schedule_batch([(task.instance(str(i)), now - timedelta(seconds=10 - i)) for i in (1, 2, 3)])
    first.start()
    try:
        assert gate.started.wait(30)
        first.stop()
        rows = [_row(first, "claimed", str(i)) for i in (1, 2, 3)]
        # all three were claimed; only the first ever started (and is abandoned, still picked),
        # the two still queued were given back at once
        assert [(r.picked, r.picked_by, r.version) for r in rows] == [
            (True, "first", 2),
            (False, None, 3),
            (False, None, 3),
        ]
        assert [(name, i) for name, i, _ in gate.ran] == [("first", "1")]
        second.start()
        wait_until(
            lambda: all(_row(first, "claimed", str(i)) is None for i in (1, 2, 3)),
            timeout=30,
            message="the abandoned one revived, and all three run elsewhere",
        )
    finally:
        gate.release.set()
        second.stop()
    assert second_events.count(SchedulerEventType.DEAD_EXECUTION) == 1
    assert sorted((name, i, v) for name, i, v in gate.ran if name == "second") == [
        ("second", "1", 4),
        ("second", "2", 4),
        ("second", "3", 4),
    ]
    wait_until(lambda: first.get_currently_executing() == [], timeout=30, message="abandoned thread done")


def test_async_execution_is_cancelled_in_the_interrupt_phase_and_its_failure_handler_runs(engine):
    cancelled = threading.Event()
    started = threading.Event()
    failures = []

    async def forever(instance, ctx) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    class Recording(OnFailureRetryLater):
        def on_failure(self, complete, ops) -> None:
            failures.append(complete)
            super().on_failure(complete, ops)

    task = Tasks.one_time("async").on_failure(Recording()).execute(forever)
    recorder = EventRecorder()
    scheduler = _scheduler(engine, task, recorder=recorder, shutdown_max_wait=SHORT_WAIT)
    scheduler.schedule(task.instance("1"))
    scheduler.start()
    try:
        assert started.wait(30)
    finally:
        began = time.monotonic()
        scheduler.stop()
        took = time.monotonic() - began
    # the first phase was waited out; the cancelled execution's failure handling was done by
    # the time stop() returned, i.e. within the second phase
    assert took >= SHORT_WAIT.total_seconds()
    [failure] = failures
    assert cancelled.is_set()
    assert isinstance(failure.cause, concurrent.futures.CancelledError | asyncio.CancelledError)
    row = _row(scheduler, "async", "1")
    assert (row.picked, row.picked_by, row.consecutive_failures, row.version) == (False, None, 1, 3)
    assert timedelta(0) <= failure.time_done - row.last_failure < timedelta(milliseconds=1)  # SQLite: ms
    assert row.execution_time - row.last_failure == timedelta(minutes=5)
    assert [c.is_success for c in recorder.completed] == [False]
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0
    assert scheduler.get_currently_executing() == []


# --------------------------------------------------------------------------- the exit hook
def test_shutdown_hook_installs_no_signal_handler(engine):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    task = Tasks.one_time("noop").execute(lambda instance, ctx: None)
    scheduler = _scheduler(engine, task, register_shutdown_hook=())
    scheduler.start()
    try:
        assert {sig: signal.getsignal(sig) for sig in before} == before
    finally:
        scheduler.stop()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_shutdown_hook_stops_the_scheduler_at_interpreter_exit(database, engine):
    """A process that returns from main without stop(): the hook lets the running execution
    finish (first phase) before the interpreter goes."""
    with scheduler_processes() as procs:
        proc = SchedulerProcess(database.url, "hooked", "hook", poll_ms=50, handler_seconds=1.0)
        procs.append(proc)
        built = proc.expect("built", 60)
        proc.send("start")
        started = proc.expect("started", 60)
        SchedulerClient(engine).schedule(TaskInstance(HOOK_TASK, "1"))
        proc.expect("handler_started", 60)
        proc.send("exit")
        proc.expect("handler_finished", 60)
        assert proc.wait(60) == 0
    assert built["sigterm"] == started["sigterm"] == repr(signal.Handlers.SIG_DFL)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar_one() == 0
