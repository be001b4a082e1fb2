"""A task's timeout on every dialect: an async body is cancelled at the deadline; a thread body
is told through ``ctx`` and, if it runs on, its run is recorded as failed at the deadline and
its late outcome discarded. Either way the failure handler gets an ExecutionTimeoutError."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from ekbatan.distributed_jobs import one_time_task
from ekbatan.distributed_jobs.scheduler import (
    ExecutionTimeoutError,
    OnFailureRetryLater,
    Scheduler,
    SchedulerClient,
    Schedules,
    Tasks,
)
from ekbatan.distributed_jobs.scheduler._clock import SystemClock
from ekbatan.distributed_jobs.scheduler._running.deadlines import COMPACT_ABOVE, DeadlineWatch
from testsupport import EventRecorder, wait_until

TIMEOUT = timedelta(milliseconds=300)
RETRY = timedelta(hours=1)


def build(engine, task, recorder: EventRecorder) -> Scheduler:
    builder = Scheduler.create(engine, task).scheduler_name("node-1").failure_logging("OFF")
    return builder.add_listener(recorder).execution_history().build()


def timed(name: str):
    return Tasks.one_time(name).timeout(TIMEOUT).on_failure(OnFailureRetryLater(RETRY))


@pytest.fixture
def client(engine) -> SchedulerClient:
    return SchedulerClient(engine)


def schedule(client: SchedulerClient, task) -> None:
    client.schedule(task.instance("1"), datetime.now(UTC) - timedelta(seconds=1))


def failed_with_timeout(client: SchedulerClient, task_name: str):
    row = client.get_scheduled_execution((task_name, "1"))
    assert row is not None
    return row


def test_an_async_body_is_cancelled_at_its_deadline_and_handed_to_the_failure_handler(engine, built, client):
    cancelled = threading.Event()

    async def slow(instance, ctx) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = timed("slow-async").execute(slow)
    recorder = EventRecorder()
    scheduler = build(engine, task, recorder)
    built.append(scheduler)
    schedule(client, task)

    started = time.monotonic()
    assert scheduler.run_any_due_executions() == 1
    assert time.monotonic() - started < 10  # not the body's 30 s
    assert cancelled.is_set()
    [complete] = recorder.completed
    assert isinstance(complete.cause, ExecutionTimeoutError)
    assert "ran past its timeout of 0:00:00.300000" in str(complete.cause)
    row = failed_with_timeout(client, "slow-async")
    assert (row.consecutive_failures, row.is_picked) == (1, False)
    assert row.execution_time > datetime.now(UTC) + RETRY - timedelta(minutes=1)  # retried later
    [run] = client.history("slow-async")
    assert run.result.value == "failed" and run.error.error_class.endswith(".ExecutionTimeoutError")


def test_a_thread_body_that_checks_its_context_stops_at_the_deadline(engine, built, client, caplog):
    seen = {}

    def careful(instance, ctx) -> None:
        seen["deadline"], seen["left"] = ctx.deadline, ctx.time_left()
        while True:
            ctx.check_cancelled()
            ctx.cancellation.wait(0.05)  # a sleep the deadline cuts short

    task = timed("careful").execute(careful)
    recorder = EventRecorder()
    scheduler = build(engine, task, recorder)
    built.append(scheduler)
    schedule(client, task)

    assert scheduler.run_any_due_executions() == 1
    assert timedelta(0) < seen["left"] <= TIMEOUT
    [complete] = recorder.completed  # recorded once, though both the body and the deadline saw it
    assert isinstance(complete.cause, ExecutionTimeoutError)
    assert failed_with_timeout(client, "careful").consecutive_failures == 1
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "after its timeout" in r.getMessage()
    ]


def test_a_thread_body_that_runs_on_is_failed_at_the_deadline_and_its_late_result_discarded(
    engine, built, client, caplog
):
    release, inside, cancelled_seen = threading.Event(), threading.Event(), threading.Event()

    def stubborn(instance, ctx) -> None:
        inside.set()
        release.wait(30)  # ignores ctx: a thread cannot be stopped from outside
        if ctx.is_cancelled:
            cancelled_seen.set()

    task = timed("stubborn").execute(stubborn)
    recorder = EventRecorder()
    scheduler = build(engine, task, recorder)
    built.append(scheduler)
    schedule(client, task)
    worker = threading.Thread(target=scheduler.run_any_due_executions, daemon=True)
    worker.start()
    try:
        assert inside.wait(10)
        # recorded as failed at the deadline while the body is still running
        wait_until(
            lambda: failed_with_timeout(client, "stubborn").consecutive_failures == 1,
            timeout=10,
            interval=0.05,
            message="the run recorded as failed at its deadline",
        )
        assert worker.is_alive() and not release.is_set()
        row = failed_with_timeout(client, "stubborn")
        assert not row.is_picked and row.execution_time > datetime.now(UTC) + RETRY - timedelta(minutes=1)
        assert scheduler.get_currently_executing() == []  # no heartbeats for a row it no longer holds
    finally:
        release.set()
        worker.join(10)
    assert not worker.is_alive()
    assert cancelled_seen.is_set()
    assert (
        failed_with_timeout(client, "stubborn").execution.version == row.execution.version
    )  # late: no write
    [complete] = recorder.completed
    assert isinstance(complete.cause, ExecutionTimeoutError)
    late = [r for r in caplog.records if "returned after its timeout" in r.getMessage()]
    assert len(late) == 1 and late[0].levelno == logging.WARNING
    [run] = client.history("stubborn")
    assert run.error.error_class.endswith(".ExecutionTimeoutError")


def test_without_a_timeout_nothing_changes(engine, built, client):
    seen = {}

    def plain(instance, ctx) -> None:
        seen.update(deadline=ctx.deadline, left=ctx.time_left(), cancelled=ctx.is_cancelled)
        ctx.check_cancelled()

    task = Tasks.one_time("plain").execute(plain)
    recorder = EventRecorder()
    scheduler = build(engine, task, recorder)
    built.append(scheduler)
    schedule(client, task)
    assert scheduler.run_any_due_executions() == 1
    assert seen == {"deadline": None, "left": None, "cancelled": False}
    assert recorder.completed[0].is_success and client.get_scheduled_execution(("plain", "1")) is None


def test_bad_timeouts_are_refused_saying_what_to_write():
    with pytest.raises(ValueError, match=r"must be positive, got datetime.timedelta\(0\); write e.g."):
        Tasks.one_time("t").timeout(timedelta(0))
    with pytest.raises(TypeError, match="must be a datetime.timedelta, not int"):
        Tasks.recurring("r", Schedules.fixed_delay(timedelta(seconds=1))).timeout(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="task 'mail': a task timeout must be positive"):
        one_time_task("mail", timeout=timedelta(seconds=-1))
    decorated = one_time_task("mail", timeout=timedelta(seconds=5))(lambda instance, ctx: None)
    assert decorated.timeout == timedelta(seconds=5)


def test_an_async_bodys_own_timeout_error_is_its_failure_not_the_tasks_timeout(engine, built, client):
    async def calls_a_slow_service(instance, ctx) -> None:
        async with asyncio.timeout(0.01):  # the body's own bound, well inside the task's
            await asyncio.sleep(30)

    task = Tasks.one_time("own-timeout").timeout(timedelta(seconds=30)).execute(calls_a_slow_service)
    recorder = EventRecorder()
    scheduler = build(engine, task, recorder)
    built.append(scheduler)
    schedule(client, task)

    started = time.monotonic()
    assert scheduler.run_any_due_executions() == 1
    assert time.monotonic() - started < 10
    [complete] = recorder.completed
    assert type(complete.cause) is TimeoutError  # not reported as "ran past its timeout of 0:00:30"
    [run] = client.history("own-timeout")
    assert run.result.value == "failed" and run.error.error_class == "TimeoutError"


def test_the_deadline_watch_forgets_runs_that_ended_before_their_deadline():
    fired: list[int] = []
    watch = DeadlineWatch(SystemClock())
    try:
        far = datetime.now(UTC) + timedelta(hours=1)
        for i in range(10_000):  # runs much shorter than a long timeout: each one watched, then ended
            watch.watch(far, lambda i=i: fired.append(i))()
        # what they held (execution, data, context) is dropped at once; the heap is compacted
        assert not watch._callbacks and len(watch._heap) <= 2 * COMPACT_ABOVE
        done = threading.Event()
        cancel_due = watch.watch(datetime.now(UTC) + timedelta(milliseconds=50), lambda: fired.append(-1))
        cancel_due()
        watch.watch(datetime.now(UTC) + timedelta(milliseconds=100), done.set)
        assert done.wait(10)
        cancel_due()  # a late cancel (after its deadline) is harmless
        assert fired == [] and not watch._callbacks
    finally:
        watch.stop()
