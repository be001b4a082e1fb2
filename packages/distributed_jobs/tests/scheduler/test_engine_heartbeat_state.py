"""Heartbeat state: the pure arithmetic of ``HeartbeatState``, and a
running scheduler whose execution's row changed under it.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    CancelDeadExecution,
    HeartbeatState,
    Scheduler,
    SchedulerEventType,
    Schedules,
    SettableClock,
    Tasks,
)
from testsupport import EventRecorder, wait_until

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


# --------------------------------------------------------------------------- HeartbeatStateTest
def _state(clock: SettableClock, interval: timedelta = MINUTE, limit: int = 4) -> HeartbeatState:
    return HeartbeatState(clock, clock.now(), interval, limit)


def test_failure_after_a_success_is_stale_and_counts_from_the_success(clock):
    start = clock.now()
    state = _state(clock)  # dead after 4 min
    clock.set(start + 30 * SECOND)
    state.success(clock.now())
    clock.set(start + 90 * SECOND)
    state.failed(clock.now())
    assert state.has_stale_heartbeat
    assert state.failed_heartbeats == 1
    assert state.fraction_dead == 0.25  # 60 s / 240 s


def test_consecutive_failures_then_a_success(clock):
    start = clock.now()
    state = _state(clock)
    clock.set(start + 30 * SECOND)
    state.failed(clock.now())
    assert (state.has_stale_heartbeat, state.failed_heartbeats, state.fraction_dead) == (True, 1, 0.125)
    clock.set(start + 90 * SECOND)
    state.failed(clock.now())
    assert (state.has_stale_heartbeat, state.failed_heartbeats, state.fraction_dead) == (True, 2, 0.375)
    clock.set(start + 150 * SECOND)
    state.success(clock.now())
    assert (state.has_stale_heartbeat, state.failed_heartbeats) == (False, 0)
    assert state.fraction_dead < 0.01


def test_staleness_tolerance_is_a_quarter_interval_capped_at_ten_seconds(clock):
    start = clock.now()
    state = _state(clock)  # 60 s + min(10 s, 15 s) = stale after 70 s
    for seconds in (0, 60, 65, 70):
        clock.set(start + seconds * SECOND)
        assert not state.has_stale_heartbeat, f"{seconds}s after the last success"
    clock.set(start + 70 * SECOND + MS)
    assert state.has_stale_heartbeat
    clock.set(start + 90 * SECOND)
    assert state.has_stale_heartbeat and state.failed_heartbeats == 0
    state.success(clock.now())
    assert not state.has_stale_heartbeat
    assert state.fraction_dead == 0.0


def test_staleness_tolerance_of_a_short_interval(clock):
    start = clock.now()
    state = _state(clock, interval=100 * MS)  # 100 ms + 25 ms
    clock.set(start + 125 * MS)
    assert not state.has_stale_heartbeat
    clock.set(start + 126 * MS)
    assert state.has_stale_heartbeat


def test_staleness_tolerance_of_a_long_interval_is_ten_seconds(clock):
    start = clock.now()
    state = _state(clock, interval=5 * MINUTE, limit=6)  # 300 s + min(10 s, 75 s)
    clock.set(start + 310 * SECOND)
    assert not state.has_stale_heartbeat
    clock.set(start + 310 * SECOND + MS)
    assert state.has_stale_heartbeat


def test_fraction_dead_is_one_exactly_at_the_dead_threshold(clock):
    start = clock.now()
    state = _state(clock, interval=MINUTE, limit=4)
    clock.set(start + 2 * MINUTE)
    assert state.fraction_dead == 0.5
    clock.set(start + 4 * MINUTE)
    assert state.fraction_dead == 1.0
    clock.set(start + 6 * MINUTE)
    assert state.fraction_dead == 1.5


# --------------------------------------------------------------------------- a row changed under a running execution
class _Paused:
    """A handler that reports it started, then waits to be released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.stale_seen_by_handler: bool | None = None

    def __call__(self, instance, ctx) -> None:
        self.started.set()
        assert self.release.wait(60), "released by the test"
        self.stale_seen_by_handler = ctx.heartbeat_state.has_stale_heartbeat


def _bump_version(engine: sa.Engine, **columns: object) -> None:
    """Another writer takes the row: its version moves on (and maybe more)."""
    sets = "".join(f", {name} = :{name}" for name in columns)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE scheduled_tasks SET version = version + 1{sets}"), columns)


def test_heartbeats_of_an_execution_whose_row_changed_fail_and_go_stale(engine):
    """DetectStaleHeartbeatTest: poll 30 ms, heartbeat 30 ms, missed limit 10, cancel when dead."""
    handler = _Paused()
    task = Tasks.one_time("paused").on_dead_execution(CancelDeadExecution()).execute(handler)
    recorder = EventRecorder()
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=30))
        .heartbeat_interval(timedelta(milliseconds=30))
        .missed_heartbeats_limit(10)
        .scheduler_name("stale")
        .add_listener(recorder)
        .build()
    )
    scheduler.schedule(task.instance("1"))
    scheduler.start()
    try:
        assert handler.started.wait(30)
        assert scheduler.get_currently_executing_with_stale_heartbeat() == []
        _bump_version(engine)
        beats = recorder.count(SchedulerEventType.RAN_UPDATE_HEARTBEATS)
        wait_until(
            lambda: recorder.count(SchedulerEventType.RAN_UPDATE_HEARTBEATS) >= beats + 3,
            timeout=30,
            message="three heartbeat runs after the version moved",
        )
        [stale] = scheduler.get_currently_executing_with_stale_heartbeat()
        assert stale.execution.key == task.instance("1").key
        assert stale.heartbeat_state.has_stale_heartbeat
        assert stale.heartbeat_state.failed_heartbeats >= 2
        assert recorder.count(SchedulerEventType.FAILED_HEARTBEAT) >= 2
        assert recorder.count(SchedulerEventType.FAILED_MULTIPLE_HEARTBEATS) >= 1
        # its last heartbeat stopped moving: found dead after 300 ms, and cancelled
        wait_until(
            lambda: scheduler.get_scheduled_execution(task.instance("1")) is None,
            timeout=30,
            message="the stale row cancelled as dead",
        )
        handler.release.set()
        wait_until(
            lambda: recorder.count(SchedulerEventType.COMPLETIONHANDLER_ERROR) == 1,
            timeout=30,
            message="the stale owner's completion refused",
        )
    finally:
        handler.release.set()
        scheduler.stop()
    assert handler.stale_seen_by_handler is True
    assert recorder.count(SchedulerEventType.DEAD_EXECUTION) == 1
    assert scheduler.get_currently_executing() == []


@pytest.mark.parametrize("kind", ["one_time", "recurring"])
def test_stale_owner_cannot_record_its_result(engine, kind):
    """The row was taken over (version moved on) while the handler ran; its
    completion — DELETE or UPDATE at the old version — changes nothing."""
    handler = _Paused()
    if kind == "one_time":
        task = Tasks.one_time("owned").execute(handler)
    else:
        task = Tasks.recurring("owned", Schedules.fixed_delay(timedelta(hours=1))).execute(handler)
    recorder = EventRecorder()
    builder = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=30))
        .heartbeat_interval(timedelta(milliseconds=50))
        .missed_heartbeats_limit(400)  # nobody declares it dead during the test
        .scheduler_name("stale-owner")
        .add_listener(recorder)
    )
    if kind == "recurring":
        builder = builder.start_tasks(task)
    scheduler = builder.build()
    if kind == "one_time":
        scheduler.schedule(task.instance("1"))
    instance_id = "1" if kind == "one_time" else "recurring"
    scheduler.start()
    try:
        assert handler.started.wait(30)
        [running] = scheduler.get_currently_executing()
        assert running.execution.version == 2
        _bump_version(
            engine,
            picked_by="usurper",
            last_heartbeat=scheduler.repository.dialect.encode_time(scheduler.clock.now()),
        )
        wait_until(
            lambda: running.heartbeat_state.failed_heartbeats >= 2,
            timeout=30,
            message="two failed heartbeats",
        )
        taken_over = scheduler.repository.get_execution("owned", instance_id)
        assert (taken_over.picked, taken_over.picked_by, taken_over.version) == (True, "usurper", 3)
        handler.release.set()
        wait_until(
            lambda: recorder.count(SchedulerEventType.COMPLETIONHANDLER_ERROR) == 1,
            timeout=30,
            message="the stale owner's completion refused",
        )
        wait_until(lambda: scheduler.get_currently_executing() == [], timeout=30, message="execution over")
        assert scheduler.repository.get_execution("owned", instance_id) == taken_over
    finally:
        handler.release.set()
        scheduler.stop()
    assert handler.stale_seen_by_handler is True
    assert [c.is_success for c in recorder.completed] == [True]
    assert recorder.count(SchedulerEventType.DEAD_EXECUTION) == 0
