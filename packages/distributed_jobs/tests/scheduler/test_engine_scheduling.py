"""Scheduling semantics of the engine — completion handlers, failure handlers with retries and
backoff — on every dialect.

Most tests drive a "manual scheduler": a Scheduler built with a SettableClock and run by hand
(``run_any_due_executions``) without ``start()``, so simulated minutes pass in milliseconds.
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from scheduler_repositories import RawBytesSerializer

from ekbatan.distributed_jobs.scheduler import (
    ExecutionComplete,
    ExecutionOperations,
    ExecutionResult,
    ExponentialBackoff,
    FailureHandlers,
    MaxRetries,
    OnCompleteRemove,
    OnCompleteRescheduleTo,
    OnFailureRetryLater,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Schedules,
    SerializationError,
    TaskInstance,
    Tasks,
)
from testsupport import EventRecorder, wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)  # the ``clock`` fixture's start
MINUTE = timedelta(minutes=1)
FAILURE_EVENTS = (
    SchedulerEventType.UNEXPECTED_ERROR,
    SchedulerEventType.COMPLETIONHANDLER_ERROR,
    SchedulerEventType.FAILUREHANDLER_ERROR,
    SchedulerEventType.DEAD_EXECUTION,
)


def half_up_ms(value: float) -> timedelta:
    """Milliseconds rounded as Java's Math.round does."""
    return timedelta(milliseconds=math.floor(value + 0.5))


def raising(message: str = "boom"):
    def handler(instance, ctx):
        raise RuntimeError(f"{message} {instance.id}")

    return handler


def no_failures(recorder: EventRecorder) -> None:
    assert {e: recorder.count(e) for e in FAILURE_EVENTS} == dict.fromkeys(FAILURE_EVENTS, 0)


# --------------------------------------------------------------------------- SchedulerTest
def test_execution_is_due_exactly_at_its_execution_time(manual, clock, dialect):
    ran: list[datetime] = []
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: ran.append(clock.now()))
    scheduler = manual(task)
    assert scheduler.schedule(task.instance("1"), T0 + timedelta(hours=1)) is True

    for before in (timedelta(minutes=1), timedelta(milliseconds=1)):
        clock.set(T0 + timedelta(hours=1) - before)
        assert scheduler.run_any_due_executions() == 0
    assert ran == []

    clock.set(T0 + timedelta(hours=1))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [T0 + timedelta(hours=1)]
    assert scheduler.get_scheduled_execution(("one-time", "1")) is None
    assert scheduler.run_any_due_executions() == 0


def test_reschedule_moves_the_execution(manual, clock, dialect):
    ran: list[datetime] = []
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: ran.append(clock.now()))
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0 + timedelta(hours=1))
    assert scheduler.reschedule(("one-time", "1"), T0 + timedelta(hours=2)) is True
    assert scheduler.get_scheduled_execution(("one-time", "1")).execution_time == T0 + timedelta(hours=2)

    clock.set(T0 + timedelta(hours=1))
    assert scheduler.run_any_due_executions() == 0
    clock.set(T0 + timedelta(hours=2) - timedelta(milliseconds=1))
    assert scheduler.run_any_due_executions() == 0
    assert ran == []
    clock.set(T0 + timedelta(hours=2))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [T0 + timedelta(hours=2)]


def test_cancelled_execution_never_runs(manual, clock, dialect):
    ran: list[str] = []
    task = Tasks.one_time("one-time").execute(lambda instance, ctx: ran.append(instance.id))
    scheduler = manual(task)
    scheduler.schedule(task.instance("cancelled"), T0 + timedelta(hours=1))
    scheduler.schedule(task.instance("kept"), T0 + timedelta(hours=1))
    scheduler.cancel(("one-time", "cancelled"))
    assert scheduler.get_scheduled_execution(("one-time", "cancelled")) is None

    clock.set(T0 + timedelta(days=1))
    assert scheduler.run_any_due_executions() == 1
    assert ran == ["kept"]


def test_recurring_fixed_delay_runs_now_and_again_one_hour_after_completion(manual, clock, dialect):
    ran: list[datetime] = []
    task = Tasks.recurring("hourly", Schedules.fixed_delay(timedelta(hours=1))).execute(
        lambda instance, ctx: ran.append(clock.now())
    )
    scheduler = manual(start_tasks=[task])
    scheduler.run_startup_tasks()
    row = scheduler.get_scheduled_execution(("hourly", "recurring"))
    assert row.execution_time == T0  # fixed delay: the first run is immediate

    assert scheduler.run_any_due_executions() == 1
    row = scheduler.get_scheduled_execution(("hourly", "recurring"))
    assert (row.execution_time, row.last_success, row.consecutive_failures, row.is_picked) == (
        T0 + timedelta(hours=1),
        T0,
        0,
        False,
    )

    clock.set(T0 + timedelta(minutes=59))
    assert scheduler.run_any_due_executions() == 0
    clock.set(T0 + timedelta(hours=1))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [T0, T0 + timedelta(hours=1)]
    assert scheduler.get_scheduled_execution(("hourly", "recurring")).execution_time == T0 + timedelta(
        hours=2
    )


def test_running_execution_is_visible_in_get_currently_executing(engine, dialect):
    entered, release = threading.Event(), threading.Event()
    seen_inside: list[list] = []

    def handler(instance, ctx):
        seen_inside.append(scheduler.get_currently_executing())
        entered.set()
        assert release.wait(10), "the test never released the handler"

    task = Tasks.one_time("blocking").execute(handler)
    recorder = EventRecorder()
    scheduler = (
        Scheduler.create(engine, task)
        .threads(2)
        .polling_interval(timedelta(minutes=1))
        .scheduler_name("node-1")
        .add_listener(recorder)
        .build()
    )
    with scheduler:
        assert scheduler.get_currently_executing() == []
        scheduler.schedule(task.instance("1"))
        try:
            assert entered.wait(5)
            running = scheduler.get_currently_executing()
            assert [(c.execution.task_name, c.execution.instance_id) for c in running] == [("blocking", "1")]
            assert running[0].execution.picked and running[0].execution.picked_by == "node-1"
            assert running[0].instance.id == "1"
            assert running[0].duration >= timedelta(0)
            row = scheduler.get_scheduled_execution(("blocking", "1"))
            assert (row.is_picked, row.picked_by) == (True, "node-1")
        finally:
            release.set()
        wait_until(lambda: len(recorder.completed) == 1, 5, message="execution completes")
        assert scheduler.get_currently_executing() == []
    assert len(seen_inside) == 1 and [c.execution.instance_id for c in seen_inside[0]] == ["1"]
    assert scheduler.get_scheduled_execution(("blocking", "1")) is None
    no_failures(recorder)


class RecordingFailureHandler:
    def __init__(self, retry_in: timedelta) -> None:
        self.retry_in = retry_in
        self.seen: list[ExecutionComplete] = []

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        self.seen.append(complete)
        ops.reschedule(complete, complete.time_done + self.retry_in)


def test_failure_cause_is_exposed_to_the_failure_handler(manual, clock, dialect):
    raised: list[BaseException] = []

    def handler(instance, ctx):
        clock.advance(timedelta(seconds=3))  # the handler takes 3 s of simulated time
        error = ValueError(f"bad input for {instance.id}")
        raised.append(error)
        raise error

    failure_handler = RecordingFailureHandler(timedelta(minutes=10))
    task = Tasks.one_time("failing").on_failure(failure_handler).execute(handler)
    recorder = EventRecorder()
    scheduler = manual(task, recorder=recorder)
    scheduler.schedule(task.instance("7"), T0)
    assert scheduler.run_any_due_executions() == 1

    [complete] = failure_handler.seen
    assert complete.cause is raised[0]
    assert complete.result is ExecutionResult.FAILED and not complete.is_success
    assert (complete.time_started, complete.time_done) == (T0, T0 + timedelta(seconds=3))
    assert (complete.execution.task_name, complete.execution.instance_id) == ("failing", "7")
    assert complete.instance.id == "7"
    assert [c.cause for c in recorder.failures()] == [raised[0]]

    row = scheduler.get_scheduled_execution(("failing", "7"))
    done = T0 + timedelta(seconds=3)
    assert (row.execution_time, row.last_failure, row.last_success, row.consecutive_failures) == (
        done + timedelta(minutes=10),
        done,
        None,
        1,
    )
    no_failures(recorder)


def test_max_retries_gives_exactly_n_plus_one_attempts(manual, clock, dialect):
    """MaxRetries(n) with a retry every minute, for every n in 0..9, over 15 simulated minutes."""
    attempts: dict[int, list[datetime]] = {n: [] for n in range(10)}
    tasks = []
    for n in range(10):

        def handler(instance, ctx, n=n):
            attempts[n].append(clock.now())
            raise RuntimeError(f"attempt {len(attempts[n])} of max-retries-{n}")

        failure = FailureHandlers.max_retries(n).retry_every(MINUTE).then_remove()
        tasks.append(Tasks.one_time(f"max-retries-{n}").on_failure(failure).execute(handler))
    scheduler = manual(*tasks)
    for task in tasks:
        scheduler.schedule(task.instance("1"), T0)

    for minute in range(16):
        clock.set(T0 + minute * MINUTE)
        scheduler.run_any_due_executions()
        if minute == 4:  # n = 9 has failed 5 times and is still scheduled, a minute later
            row = scheduler.get_scheduled_execution(("max-retries-9", "1"))
            assert (row.consecutive_failures, row.execution_time) == (5, T0 + 5 * MINUTE)

    for n in range(10):
        assert attempts[n] == [T0 + k * MINUTE for k in range(n + 1)], f"max_retries({n})"
    assert scheduler.get_scheduled_executions() == []


@pytest.mark.parametrize(
    ("rate", "attempt_minutes"),
    [
        (None, [0, 1, 3, 6, 10, 16, 24, 36, 54, 80]),  # default rate 1.5
        (1.4, [0, 1, 3, 5, 8, 12, 18, 26, 37, 52, 73]),
    ],
    ids=["rate-1.5-default", "rate-1.4"],
)
def test_exponential_backoff_over_80_minutes_stepped_one_minute(
    manual, clock, dialect, rate, attempt_minutes
):
    effective_rate = 1.5 if rate is None else rate
    backoff = ExponentialBackoff(MINUTE) if rate is None else ExponentialBackoff(MINUTE, rate=rate)
    attempts: list[datetime] = []

    def handler(instance, ctx):
        attempts.append(clock.now())
        raise RuntimeError("always fails")

    task = Tasks.one_time("backoff").on_failure(backoff).execute(handler)
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0)

    for minute in range(81):
        clock.set(T0 + minute * MINUTE)
        if scheduler.run_any_due_executions():
            failures = len(attempts)
            # exact: the retry is due round(60 000 × rate^(failures before)) ms after the failure
            delay = half_up_ms(60_000 * effective_rate ** (failures - 1))
            row = scheduler.get_scheduled_execution(("backoff", "1"))
            assert row.execution_time == clock.now() + delay
            assert row.consecutive_failures == failures

    assert attempts == [T0 + m * MINUTE for m in attempt_minutes]
    # the i-th retry comes no earlier than the cumulative sum of the delays before it
    cumulative = timedelta(0)
    for i in range(1, len(attempts)):
        delay = half_up_ms(60_000 * effective_rate ** (i - 1))
        assert attempts[i] - attempts[i - 1] >= delay
        cumulative += delay
        assert attempts[i] - attempts[0] >= cumulative


def test_exponential_backoff_rounds_half_up_and_caps():
    # Java's Math.round: 4000 ms × 1.5^6 = 45 562.5 ms waits 45 563 ms (not banker's 45 562)
    assert ExponentialBackoff(timedelta(seconds=4)).delay_for(6) == timedelta(milliseconds=45_563)
    assert ExponentialBackoff(timedelta(milliseconds=2)).delay_for(2) == timedelta(milliseconds=5)
    assert [ExponentialBackoff(MINUTE).delay_for(k) for k in range(4)] == [
        timedelta(milliseconds=ms) for ms in (60_000, 90_000, 135_000, 202_500)
    ]
    capped = ExponentialBackoff(MINUTE, rate=2.0, max_delay=timedelta(minutes=5))
    assert [capped.delay_for(k) for k in range(5)] == [MINUTE * m for m in (1, 2, 4, 5, 5)]
    with pytest.raises(ValueError, match="rate"):
        ExponentialBackoff(MINUTE, rate=0.9)
    with pytest.raises(ValueError, match="positive"):
        ExponentialBackoff(timedelta(0))


# --------------------------------------------------------------------------- MaxRetriesFailureHandlerTest
TICK = timedelta(seconds=2)
RETRY = timedelta(seconds=1)


def test_max_retries_then_remove_calls_the_listener_after_the_last_attempt(manual, clock, dialect):
    exceeded: list[ExecutionComplete] = []
    failure = FailureHandlers.max_retries(3).retry_every(RETRY).then_remove(lambda c, ops: exceeded.append(c))
    task = Tasks.one_time("flaky").on_failure(failure).execute(raising())
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0)

    for run in range(1, 4):
        assert scheduler.run_any_due_executions() == 1
        row = scheduler.get_scheduled_execution(("flaky", "1"))
        assert (row.consecutive_failures, row.execution_time) == (run, clock.now() + RETRY)
        clock.advance(TICK)
    assert exceeded == []

    assert scheduler.run_any_due_executions() == 1  # the 4th attempt: 1 + 3 retries
    assert scheduler.get_scheduled_execution(("flaky", "1")) is None
    assert len(exceeded) == 1
    assert exceeded[0].execution.consecutive_failures == 3
    assert str(exceeded[0].cause) == "boom 1"
    clock.advance(TICK)
    assert scheduler.run_any_due_executions() == 0


def test_max_retries_then_custom_handler_reschedules_to_tomorrow(manual, clock, dialect):
    called: list[str] = []

    class RescheduleTomorrow:
        def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
            called.append("handler")
            ops.reschedule(complete, complete.time_done + timedelta(days=1))

    failure = (
        FailureHandlers.max_retries(2)
        .retry_every(RETRY)
        .then(RescheduleTomorrow(), lambda c, ops: called.append("listener"))
    )
    task = Tasks.one_time("flaky").on_failure(failure).execute(raising())
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0)

    for _ in range(3):
        assert called == []
        assert scheduler.run_any_due_executions() == 1
        clock.advance(TICK)
    assert called == ["handler", "listener"]
    row = scheduler.get_scheduled_execution(("flaky", "1"))
    assert (row.execution_time, row.consecutive_failures) == (T0 + 2 * TICK + timedelta(days=1), 3)
    assert scheduler.run_any_due_executions() == 0


def test_max_retries_constructed_directly_behaves_like_then_remove(manual, clock, dialect):
    task = Tasks.one_time("flaky").on_failure(MaxRetries(3, OnFailureRetryLater(RETRY))).execute(raising())
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0)
    for _ in range(3):
        assert scheduler.run_any_due_executions() == 1
        clock.advance(TICK)
        assert scheduler.get_scheduled_execution(("flaky", "1")) is not None
    assert scheduler.run_any_due_executions() == 1
    assert scheduler.get_scheduled_execution(("flaky", "1")) is None


def test_max_retries_with_backoff_waits_initial_then_initial_times_rate(manual, clock, dialect):
    attempts: list[datetime] = []

    def handler(instance, ctx):
        attempts.append(clock.now())
        raise RuntimeError("fails")

    failure = FailureHandlers.max_retries(2).with_backoff(timedelta(seconds=10), rate=2.0).then_remove()
    task = Tasks.one_time("flaky").on_failure(failure).execute(handler)
    scheduler = manual(task)
    scheduler.schedule(task.instance("1"), T0)
    for second in range(0, 61):
        clock.set(T0 + timedelta(seconds=second))
        scheduler.run_any_due_executions()
    assert attempts == [T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=30)]
    assert scheduler.get_scheduled_execution(("flaky", "1")) is None


def test_max_retries_without_a_retry_policy_is_an_error():
    with pytest.raises(ValueError, match=r"retry_every\(delay\) or \.with_backoff"):
        FailureHandlers.max_retries(3).then_remove()
    with pytest.raises(ValueError, match="no retry behavior"):
        FailureHandlers.max_retries(3).then(OnFailureRetryLater())
    with pytest.raises(ValueError, match=">= 0"):
        FailureHandlers.max_retries(-1)


# --------------------------------------------------------------------------- async handlers
def test_async_handler_runs_on_the_schedulers_event_loop(manual, clock, dialect):
    seen: list[tuple[str, threading.Thread, str]] = []

    async def handler(instance, ctx):
        await asyncio.sleep(0)
        asyncio.get_running_loop()  # raises unless inside a running loop
        seen.append((instance.id, threading.current_thread(), instance.data["to"]))

    task = Tasks.one_time("async-mail").execute(handler)
    scheduler = manual(task)
    scheduler.schedule(task.instance("1", {"to": "ada@example.org"}), T0)
    assert scheduler.run_any_due_executions() == 1
    [(instance_id, thread, to)] = seen
    assert (instance_id, to) == ("1", "ada@example.org")
    assert thread is not threading.current_thread()
    assert scheduler.get_scheduled_execution(("async-mail", "1")) is None

    scheduler.stop()  # stops the loop thread even though the scheduler was never started
    thread.join(5)
    assert not thread.is_alive()


def test_async_handler_failure_goes_to_the_failure_handler(manual, clock, dialect):
    async def handler(instance, ctx):
        await asyncio.sleep(0)
        raise LookupError(f"nothing for {instance.id}")

    recorder = EventRecorder()
    task = Tasks.one_time("async-failing").execute(handler)
    scheduler = manual(task, recorder=recorder)
    scheduler.schedule(task.instance("x"), T0)
    assert scheduler.run_any_due_executions() == 1
    [failure] = recorder.failures()
    assert isinstance(failure.cause, LookupError) and str(failure.cause) == "nothing for x"
    row = scheduler.get_scheduled_execution(("async-failing", "x"))
    # one-time default failure handler: retry 5 minutes after the failure
    assert (row.execution_time, row.consecutive_failures) == (T0 + timedelta(minutes=5), 1)


def test_async_custom_and_stateful_handlers_return_their_outcome(manual, clock, dialect):
    async def custom(instance, ctx):
        await asyncio.sleep(0)
        if instance.data >= 2:
            return OnCompleteRemove()
        return OnCompleteRescheduleTo(ctx.execution.execution_time + MINUTE, instance.data + 1)

    async def stateful(instance, ctx):
        await asyncio.sleep(0)
        return {"count": instance.data["count"] + 1}

    custom_task = Tasks.custom("async-custom").execute(custom)
    stateful_task = (
        Tasks.recurring("async-stateful", Schedules.fixed_delay(MINUTE))
        .initial_data({"count": 0})
        .execute_stateful(stateful)
    )
    scheduler = manual(custom_task, start_tasks=[stateful_task])
    scheduler.run_startup_tasks()
    scheduler.schedule(custom_task.instance("1", 1), T0)

    assert scheduler.run_any_due_executions() == 2
    assert scheduler.get_scheduled_execution(("async-custom", "1")).data == 2
    assert scheduler.get_scheduled_execution(("async-stateful", "recurring")).data == {"count": 1}
    clock.set(T0 + MINUTE)
    assert scheduler.run_any_due_executions() == 2
    assert scheduler.get_scheduled_execution(("async-custom", "1")) is None
    assert scheduler.get_scheduled_execution(("async-stateful", "recurring")).data == {"count": 2}


# --------------------------------------------------------------------------- undecodable data
@dataclass
class Mail:
    to: str
    subject: str


def test_undecodable_data_fails_only_that_execution(manual, engine, clock, dialect):
    delivered: list[Mail] = []
    task = Tasks.one_time("send-mail", data_type=Mail).execute(
        lambda instance, ctx: delivered.append(instance.data)
    )
    recorder = EventRecorder()
    scheduler = manual(task, recorder=recorder)
    scheduler.schedule(task.instance("good-1", Mail("ada@example.org", "hi")), T0)
    scheduler.schedule(task.instance("good-2", Mail("bob@example.org", "yo")), T0)
    raw = SchedulerClient(engine, serializer=RawBytesSerializer(), clock=clock)
    raw.schedule(TaskInstance("send-mail", "not-json", b"\xff\xfe{not json"), T0)
    raw.schedule(TaskInstance("send-mail", "wrong-shape", b'{"to": "eve@example.org"}'), T0)

    assert scheduler.run_any_due_executions() == 4
    assert sorted(m.to for m in delivered) == ["ada@example.org", "bob@example.org"]
    failures = {c.execution.instance_id: c.cause for c in recorder.failures()}
    assert set(failures) == {"not-json", "wrong-shape"}
    for instance_id, cause in failures.items():
        assert isinstance(cause, SerializationError)
        assert f"send-mail/{instance_id}" in str(cause)
    assert "not UTF-8 JSON" in str(failures["not-json"])
    assert "does not decode as Mail" in str(failures["wrong-shape"])

    rows = {e.instance_id: e for e in scheduler.get_scheduled_executions()}
    assert set(rows) == {"not-json", "wrong-shape"}  # the good ones completed and were deleted
    for row in rows.values():
        assert (row.execution_time, row.consecutive_failures, row.is_picked) == (
            T0 + timedelta(minutes=5),
            1,
            False,
        )
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0
