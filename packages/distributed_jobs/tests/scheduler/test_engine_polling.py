"""Polling: early re-fetch, immediate execution, priority, the waiter, unresolved task names,
pause/resume, on every dialect.

The polling interval is one minute wherever a test checks that something ran early, so only
the engine's early triggers (batch running low, immediate execution, the next known due time)
can explain an execution that completes well inside it. Those tests wait with a deadline of a
third of the interval: generous on a loaded machine, and still far from the next interval poll.
No test asserts how fast anything ran.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    OnCompleteRemove,
    OnCompleteRescheduleTo,
    ScheduledExecutionsFilter,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    SettableClock,
    TaskInstance,
    Tasks,
)
from ekbatan.distributed_jobs.scheduler._observability import Listeners
from ekbatan.distributed_jobs.scheduler._polling.poller import (
    PollLoop,
    PollResult,
    _Batch,
)
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import PollingStrategyConfig
from ekbatan.distributed_jobs.scheduler._polling.waiter import Waiter
from ekbatan.distributed_jobs.scheduler._running.runner import CLAIM_LEAD
from testsupport import EventRecorder, wait_until

MINUTE = timedelta(minutes=1)
# seconds: what "well before the next interval poll" means in a test's deadline
INSIDE_THE_INTERVAL = MINUTE.total_seconds() / 3
FAILURE_EVENTS = (
    SchedulerEventType.UNEXPECTED_ERROR,
    SchedulerEventType.COMPLETIONHANDLER_ERROR,
    SchedulerEventType.FAILUREHANDLER_ERROR,
    SchedulerEventType.DEAD_EXECUTION,
)
LOCK_AND_FETCH_DIALECTS = ("postgres", "mariadb", "mysql")


def noop(instance, ctx) -> None:
    return None


def no_failures(recorder: EventRecorder) -> None:
    assert {e: recorder.count(e) for e in FAILURE_EVENTS} == dict.fromkeys(FAILURE_EVENTS, 0)


@pytest.fixture
def make(engine: sa.Engine, built: list[Scheduler]):
    """``make(*tasks, recorder=..., configure=lambda builder: builder)``: a scheduler polling
    every minute, with its own SystemClock, stopped at the end of the test."""

    def build(*tasks, recorder: EventRecorder, configure=lambda b: b, threads: int = 10) -> Scheduler:
        builder = (
            Scheduler.create(engine, *tasks)
            .threads(threads)
            .polling_interval(MINUTE)
            .scheduler_name("poller")
            .add_listener(recorder)
        )
        scheduler = configure(builder).build()
        built.append(scheduler)
        return scheduler

    return build


def polled(recorder: EventRecorder, times: int = 1) -> bool:
    return recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) >= times


# --------------------------------------------------------------------------- ExecutorPoolTest
@pytest.mark.parametrize(("threads", "executions"), [(2, 20), (10, 20), (4, 200)])
def test_executor_pool_runs_everything_through_early_refetches(engine, make, dialect, threads, executions):
    recorder = EventRecorder()
    task = Tasks.one_time("pool").execute(noop)
    client = SchedulerClient(engine, [task])
    client.schedule_batch([task.instance(str(i)) for i in range(executions)])  # all due now
    scheduler = make(
        task,
        recorder=recorder,
        threads=threads,
        configure=lambda b: b.enable_immediate_execution(False).poll_using_fetch(),
    )
    upper = 3 * threads  # default fetch fractions (0.5, 3.0)

    with scheduler:
        # without early re-fetches the rest would wait for the next poll, a minute away
        wait_until(
            lambda: len(recorder.completed) >= executions,
            INSIDE_THE_INTERVAL,
            message=f"{executions} completions before the next interval poll",
        )
    assert len(recorder.successes()) == executions
    assert sorted(int(c.execution.instance_id) for c in recorder.completed) == list(range(executions))
    # a single poll can fetch at most `upper` rows: the rest came from early re-fetches
    assert recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) >= -(-executions // upper)
    assert client.get_scheduled_executions(ScheduledExecutionsFilter.all()) == []
    no_failures(recorder)


# --------------------------------------------------------------------------- DueExecutionsBatchTest
def completions_until_trigger(batch: _Batch, done: int) -> int:
    return sum(batch.one_done() for _ in range(done))


def test_batch_triggers_once_when_it_runs_low():
    lower, upper = PollingStrategyConfig.fetch().limits(10)
    assert (lower, upper) == (5, 30)
    batch = _Batch(generation=1, size=20, possibly_more=True, lower=lower)
    triggers = []
    for _ in range(20):
        triggers.append(batch.one_done())
    # completions 1..14 leave more than 5 in the batch; the 15th leaves 5: trigger, once
    assert [i + 1 for i, t in enumerate(triggers) if t] == [15]
    assert completions_until_trigger(_Batch(1, 20, True, 5), 10) == 0
    assert completions_until_trigger(_Batch(1, 20, True, 5), 14) == 0
    assert completions_until_trigger(_Batch(1, 20, True, 5), 15) == 1


def test_batch_does_not_trigger_when_the_fetch_was_not_full_or_is_stale():
    assert completions_until_trigger(_Batch(1, 20, possibly_more=False, lower=5), 20) == 0
    stale = _Batch(1, 20, possibly_more=True, lower=5)
    stale.stale = True
    assert completions_until_trigger(stale, 20) == 0


def test_polling_limits_are_truncated_fractions_of_threads():
    assert PollingStrategyConfig.fetch().limits(1) == (0, 3)
    assert PollingStrategyConfig.lock_and_fetch().limits(10) == (5, 10)
    assert PollingStrategyConfig.lock_and_fetch(1.0, 4.0).limits(3) == (3, 12)
    with pytest.raises(ValueError, match="below the upper"):
        PollingStrategyConfig.fetch(3.0, 3.0)
    with pytest.raises(ValueError, match=">= 1.0"):
        PollingStrategyConfig.fetch(0.1, 0.9)


# --------------------------------------------------------------------------- ImmediateExecutionTest
def test_scheduling_something_due_now_wakes_the_poller(make, dialect):
    recorder = EventRecorder()
    task = Tasks.one_time("immediate").execute(noop)
    with make(task, recorder=recorder) as scheduler:
        wait_until(lambda: polled(recorder), 5, message="first poll")
        scheduler.schedule(task.instance("1"))
        wait_until(lambda: recorder.completed, INSIDE_THE_INTERVAL, message="immediate execution")
    assert [c.execution.instance_id for c in recorder.successes()] == ["1"]
    no_failures(recorder)


def test_two_step_custom_task_rescheduling_itself_to_now(make, dialect):
    recorder = EventRecorder()

    def handler(instance, ctx):
        if instance.data >= 2:
            return OnCompleteRemove()
        return OnCompleteRescheduleTo(datetime.now(UTC), instance.data + 1)

    task = Tasks.custom("two-step").execute(handler)
    with make(task, recorder=recorder) as scheduler:
        wait_until(lambda: polled(recorder), 5, message="first poll")
        scheduler.schedule(task.instance("1", 1))
        wait_until(lambda: len(recorder.completed) >= 2, INSIDE_THE_INTERVAL, message="two steps")
        wait_until(lambda: scheduler.get_scheduled_executions(ScheduledExecutionsFilter.all()) == [], 2)
    assert len(recorder.successes()) == 2
    no_failures(recorder)


def test_without_immediate_execution_only_a_trigger_or_the_interval_polls(make, dialect):
    recorder = EventRecorder()
    task = Tasks.one_time("not-immediate").execute(noop)
    with make(task, recorder=recorder, configure=lambda b: b.enable_immediate_execution(False)) as scheduler:
        wait_until(lambda: polled(recorder), 5, message="first poll")
        scheduler.schedule(task.instance("1"))
        time.sleep(0.5)  # a bounded negative check: nothing may run before the next poll
        assert recorder.completed == []
        polls = recorder.count(SchedulerEventType.RAN_EXECUTE_DUE)
        scheduler.trigger_check_for_due_executions()
        wait_until(lambda: recorder.completed, INSIDE_THE_INTERVAL, message="triggered execution")
        assert recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) > polls  # the triggered poll


def test_execution_due_within_the_interval_runs_at_its_time(make, dialect):
    recorder = EventRecorder()
    started_at: list[datetime] = []
    task = Tasks.one_time("soon").execute(lambda instance, ctx: started_at.append(datetime.now(UTC)))
    with make(task, recorder=recorder) as scheduler:
        wait_until(lambda: polled(recorder), 5, message="first poll")
        due = datetime.now(UTC) + timedelta(milliseconds=300)
        scheduler.schedule(task.instance("1"), due)
        wait_until(lambda: recorder.completed, INSIDE_THE_INTERVAL, message="execution due in 300 ms")
    [started] = started_at
    stored_due = recorder.completed[0].execution.execution_time
    assert stored_due <= started  # at its time, never before; "not at the next interval poll" is the wait


def test_row_inserted_elsewhere_before_start_runs_at_its_time(engine, make, dialect):
    recorder = EventRecorder()
    task = Tasks.one_time("elsewhere").execute(noop)
    due = datetime.now(UTC) + timedelta(milliseconds=400)
    SchedulerClient(engine, [task]).schedule(task.instance("1"), due)
    with make(task, recorder=recorder):
        wait_until(
            lambda: recorder.completed,
            INSIDE_THE_INTERVAL,
            message="the poller sleeps only until the next due time",
        )
    [complete] = recorder.completed
    assert complete.time_started >= complete.execution.execution_time


# --------------------------------------------------------------------------- PriorityExecutionTest
JAN_1 = datetime(2020, 1, 1, tzinfo=UTC)


def hour(h: int) -> datetime:
    return JAN_1 + timedelta(hours=h)


def strategy(name: str):
    if name == "fetch":
        return lambda b: b.poll_using_fetch()
    return lambda b: b.poll_using_lock_and_fetch()


def run_prioritized(engine, make, *, priority: bool, configure) -> list[tuple[int | None, datetime]]:
    order: list[tuple[int | None, datetime]] = []
    recorder = EventRecorder()
    task = Tasks.one_time("prioritized").execute(
        lambda instance, ctx: order.append((ctx.execution.priority, ctx.execution.execution_time))
    )

    def options(builder):
        return configure(builder.enable_priority(priority))

    scheduler = make(task, recorder=recorder, threads=1, configure=options)
    for p, at in ((3, hour(20)), (1, hour(18)), (0, hour(10)), (2, hour(9))):
        assert scheduler.schedule(task.instance(f"p{p}", priority=p), at) is True
    assert scheduler.schedule(task.instance("p3", priority=3), hour(1)) is False  # duplicate: ignored
    # rows written without priority (a client that does not enable it) hold NULL
    plain = SchedulerClient(engine, [task])
    for h in (8, 7):
        plain.schedule(TaskInstance("prioritized", f"null-{h}"), hour(h))
    with scheduler:
        wait_until(lambda: len(recorder.completed) == 6, 5, message="six executions")
    no_failures(recorder)
    return order


def prioritized_order(dialect: str) -> list[tuple[int | None, datetime]]:
    """db-scheduler's ``priority DESC, execution_time ASC``: PostgreSQL sorts NULL above every
    priority, the other databases below."""
    ranked = [(3, hour(20)), (2, hour(9)), (1, hour(18)), (0, hour(10))]
    unset = [(None, hour(7)), (None, hour(8))]
    return unset + ranked if dialect == "postgres" else ranked + unset


def test_priority_enabled_runs_highest_first_and_null_where_db_scheduler_sorts_it(engine, make, dialect):
    order = run_prioritized(engine, make, priority=True, configure=strategy("fetch"))
    assert order == prioritized_order(dialect)


@pytest.mark.dialects(*LOCK_AND_FETCH_DIALECTS)
def test_priority_enabled_with_lock_and_fetch(engine, make, dialect):
    order = run_prioritized(engine, make, priority=True, configure=strategy("lock_and_fetch"))
    assert order == prioritized_order(dialect)


def test_priority_disabled_runs_in_execution_time_order(engine, make, dialect):
    order = run_prioritized(engine, make, priority=False, configure=strategy("fetch"))
    assert [at for _, at in order] == [hour(7), hour(8), hour(9), hour(10), hour(18), hour(20)]
    assert [p for p, _ in order] == [None] * 6  # without priority the column is never written


@pytest.mark.dialects(*LOCK_AND_FETCH_DIALECTS)
def test_priority_disabled_with_lock_and_fetch(engine, make, dialect):
    order = run_prioritized(engine, make, priority=False, configure=strategy("lock_and_fetch"))
    assert [at for _, at in order] == [hour(7), hour(8), hour(9), hour(10), hour(18), hour(20)]


# --------------------------------------------------------------------------- WaiterTest
def timed_wait(waiter: Waiter, seconds: float) -> tuple[threading.Thread, dict[str, float]]:
    result: dict[str, float] = {}

    def run() -> None:
        began = time.monotonic()
        waiter.wait(seconds)
        result["elapsed"] = time.monotonic() - began

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


# A wait that must end early waits a minute; the test gives it a third of that to end.
LONG_WAIT = MINUTE.total_seconds()


def ended_early(thread: threading.Thread) -> bool:
    thread.join(INSIDE_THE_INTERVAL)
    return not thread.is_alive()


def test_waiter_waits_the_whole_duration():
    began = time.monotonic()
    Waiter().wait(0.1)
    assert time.monotonic() - began >= 0.1
    thread, _ = timed_wait(Waiter(), 0)
    assert ended_early(thread), "a zero wait returns at once; it does not mean 'forever'"


def test_waiter_wake_ends_the_wait_early_each_time():
    waiter = Waiter()
    assert waiter.wake() is False  # nobody waiting: no effect on a later wait
    for _ in range(2):
        thread, _ = timed_wait(waiter, LONG_WAIT)
        wait_until(waiter.wake, 5, message="a waiting thread to wake")
        assert ended_early(thread)


def test_waiter_ignores_a_bare_notify():
    waiter = Waiter()
    thread, result = timed_wait(waiter, 0.2)
    wait_until(lambda: waiter._waiting, 2)
    with waiter._cond:
        waiter._cond.notify_all()
    thread.join(2)
    assert result["elapsed"] >= 0.2


def test_waiter_skip_next_wait_when_woken_while_not_waiting():
    waiter = Waiter()
    waiter.wake_or_skip_next_wait()
    thread, _ = timed_wait(waiter, LONG_WAIT)
    assert ended_early(thread)
    began = time.monotonic()
    waiter.wait(0.1)  # the skip is used up
    assert time.monotonic() - began >= 0.1


def test_waiter_wake_by_only_shortens_the_wait():
    waiter = Waiter()
    thread, result = timed_wait(waiter, LONG_WAIT)
    wait_until(lambda: waiter._waiting, 5)
    waiter.wake_by(0.1)
    assert ended_early(thread)
    assert result["elapsed"] >= 0.1

    thread, result = timed_wait(waiter, 0.2)
    wait_until(lambda: waiter._waiting, 5)
    waiter.wake_by(LONG_WAIT)  # later than the wait's own end: no effect
    assert ended_early(thread)
    assert result["elapsed"] >= 0.2


class _State:
    def __init__(self) -> None:
        self.is_started = True
        self.is_shutting_down = False
        self.is_paused = False


class _CountingWaiter(Waiter):
    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, seconds: float) -> None:
        self.waits += 1
        super().wait(seconds)


class _FailingEveryOtherRun:
    """A polling strategy whose odd-numbered runs raise."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, now=None) -> PollResult:
        self.runs += 1
        if self.runs % 2 == 1:
            raise RuntimeError(f"poll {self.runs} failed")
        return PollResult(0, possibly_more=True)


def test_poll_loop_waits_after_failing_and_after_normal_runs():
    recorder = EventRecorder()
    state, strategy, waiter = _State(), _FailingEveryOtherRun(), _CountingWaiter()
    loop = PollLoop(strategy, None, SettableClock(), state, Listeners([recorder]), MINUTE, waiter)  # type: ignore[arg-type]
    loop.start()
    try:
        for runs in (1, 2, 3):
            # the n-th wait in progress means the loop came back to waiting after run n
            wait_until(lambda runs=runs: waiter.waits == runs and waiter._waiting, 2, message=f"wait {runs}")
            assert strategy.runs == runs
            assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == (runs + 1) // 2
            if runs == 3:
                state.is_paused = True  # paused: the next wake-up runs nothing and waits again
            waiter.wake()
        wait_until(lambda: waiter.waits == 4 and waiter._waiting, 2, message="wait while paused")
        assert strategy.runs == 3
    finally:
        state.is_shutting_down = True
        waiter.wake_or_skip_next_wait()
        assert loop.join(2)


def test_a_known_due_time_is_polled_for_claim_lead_early_and_consumed_once():
    clock = SettableClock(datetime(2026, 1, 1, tzinfo=UTC))
    t0 = clock.now()
    loop = PollLoop(None, None, clock, _State(), Listeners([]), MINUTE, Waiter())  # type: ignore[arg-type]
    due = t0 + timedelta(seconds=1)
    assert loop.announce(due) == pytest.approx(1 - CLAIM_LEAD)
    assert loop.announce(t0 + timedelta(seconds=5)) == pytest.approx(5 - CLAIM_LEAD), "the earliest stays"
    assert loop._claim_horizon(t0) == t0, "too far ahead: poll for what is due now"
    clock.set(due - timedelta(seconds=CLAIM_LEAD / 2))
    assert loop._claim_horizon(clock.now()) == due, "within the lead: claim what is due by then"
    assert loop._claim_horizon(clock.now()) == clock.now(), "consumed by that poll"
    clock.set(due + timedelta(seconds=1))
    loop.announce(due)
    assert loop._claim_horizon(clock.now()) == clock.now(), "never a horizon in the past"


class _SlowNextDue:
    """The table's next due time, found while the clock moves past it (a slow round trip)."""

    def __init__(self, clock: SettableClock, next_due: datetime, query_takes: timedelta) -> None:
        self.clock, self.next_due, self.query_takes = clock, next_due, query_takes
        self.asked_after: list[datetime] = []

    def next_execution_time(self, after: datetime) -> datetime:
        self.asked_after.append(after)
        self.clock.set(self.clock.now() + self.query_takes)
        return self.next_due


def test_a_next_due_time_passing_during_its_own_query_polls_at_once_not_after_the_interval():
    clock = SettableClock(datetime(2026, 1, 1, tzinfo=UTC))
    t0 = clock.now()
    table = _SlowNextDue(clock, t0 + timedelta(milliseconds=1), query_takes=timedelta(milliseconds=3))
    loop = PollLoop(None, table, clock, _State(), Listeners([]), MINUTE, Waiter())  # type: ignore[arg-type]
    assert loop._until_next_due(60.0, t0) == 0.0, "due before the answer arrived: poll now"
    assert table.asked_after == [t0], "after what the poll just took, not after a later now"
    table.next_due = clock.now() + timedelta(seconds=2)
    assert loop._until_next_due(60.0, clock.now()) == pytest.approx(2 - 0.003 - CLAIM_LEAD)


# --------------------------------------------------------------------------- unresolved tasks
def unknown_rows(client: SchedulerClient) -> dict[str, tuple[bool, int]]:
    return {
        e.task_name: (e.is_picked, e.execution.version)
        for e in client.get_scheduled_executions(ScheduledExecutionsFilter.all())
        if e.task_name.startswith("unknown")
    }


def check_unknown_rows_are_never_left_picked(engine, make, configure) -> None:
    recorder = EventRecorder()
    known = Tasks.one_time("known").execute(noop)
    client = SchedulerClient(engine)
    earlier = datetime.now(UTC) - timedelta(hours=1)
    for i in (1, 2, 3):
        client.schedule(TaskInstance(f"unknown-{i}", "1", {"from": "the new version"}), earlier)
    client.schedule(TaskInstance("known", "1"), datetime.now(UTC))

    with make(known, recorder=recorder, configure=configure) as scheduler:
        for step in (1, 2):
            if step == 2:
                scheduler.schedule(known.instance("2"))  # wakes the poller for a second poll
            wait_until(
                lambda step=step: len(recorder.completed) == step, 5, message=f"known execution {step}"
            )
            assert {name: picked for name, (picked, _) in unknown_rows(client).items()} == {
                "unknown-1": False,
                "unknown-2": False,
                "unknown-3": False,
            }
            # recorded once each: by the poll under fetch, by the dead-execution pass (its own
            # thread, racing the known execution) under lock-and-fetch, which never claims them
            wait_until(
                lambda: recorder.count(SchedulerEventType.UNRESOLVED_TASK) == 3,
                5,
                message="each unknown task name recorded once",
            )
    assert [c.execution.task_name for c in recorder.successes()] == ["known", "known"]
    no_failures(recorder)


def test_fetch_never_picks_unknown_task_rows(engine, make, dialect):
    check_unknown_rows_are_never_left_picked(engine, make, lambda b: b.poll_using_fetch(0.5, 3.0))
    assert {v for _, v in unknown_rows(SchedulerClient(engine)).values()} == {1}  # never even claimed


@pytest.mark.dialects(*LOCK_AND_FETCH_DIALECTS)
def test_lock_and_fetch_never_leaves_unknown_task_rows_picked(engine, make, dialect):
    check_unknown_rows_are_never_left_picked(engine, make, lambda b: b.poll_using_lock_and_fetch(1.0, 3.0))
    # the claim names the tasks it knows: rows of other names are never claimed (version unchanged)
    versions = {v for _, v in unknown_rows(SchedulerClient(engine)).values()}
    assert versions == {1}


# --------------------------------------------------------------------------- DeleteUnresolvedTest
MARCH_1 = datetime(2018, 3, 1, 8, 0, tzinfo=UTC)


def test_unresolved_rows_are_deleted_after_the_default_14_days(engine, built, dialect):
    clock = SettableClock(MARCH_1)
    recorder = EventRecorder()
    scheduler = Scheduler.create(engine).clock(clock).scheduler_name("manual").add_listener(recorder).build()
    built.append(scheduler)
    scheduler.schedule(TaskInstance("unknown-task", "1", {"n": 1}), MARCH_1)

    assert scheduler.run_any_due_executions() == 0
    assert recorder.count(SchedulerEventType.UNRESOLVED_TASK) == 1
    scheduler.run_dead_execution_detection()
    assert len(scheduler.get_scheduled_executions()) == 1  # kept for the instances that know it
    assert scheduler.get_scheduled_executions(ScheduledExecutionsFilter.only_resolved()) == []

    clock.set(MARCH_1 + timedelta(days=30))
    scheduler.run_dead_execution_detection()
    assert scheduler.get_scheduled_executions(ScheduledExecutionsFilter.all()) == []


def test_unresolved_age_counts_from_the_rows_execution_time(engine, built, dialect):
    clock = SettableClock(MARCH_1 + timedelta(days=13))
    recorder = EventRecorder()
    scheduler = Scheduler.create(engine).clock(clock).scheduler_name("manual").add_listener(recorder).build()
    built.append(scheduler)
    other_node = SchedulerClient(engine, clock=clock)
    other_node.schedule(TaskInstance("unknown-task", "due"), MARCH_1)
    other_node.schedule(TaskInstance("unknown-task", "running"), MARCH_1 + timedelta(days=13))
    other_node.schedule(TaskInstance("other-unknown", "later"), MARCH_1 + timedelta(days=13))
    running = other_node.get_scheduled_execution(("unknown-task", "running")).execution
    assert other_node.repository.pick(running, clock.now()) is not None

    scheduler.run_any_due_executions()  # discovered 13 days after the oldest row was due
    assert recorder.count(SchedulerEventType.UNRESOLVED_TASK) == 2
    for at in (MARCH_1 + timedelta(days=13), MARCH_1 + timedelta(days=14)):
        clock.set(at)
        scheduler.run_dead_execution_detection()
        assert len(other_node.get_scheduled_executions(ScheduledExecutionsFilter.all())) == 3

    clock.set(MARCH_1 + timedelta(days=14, milliseconds=1))
    scheduler.run_dead_execution_detection()
    # every row of that name goes, picked or not; the younger unknown name stays
    remaining = other_node.get_scheduled_executions(ScheduledExecutionsFilter.all())
    assert [(e.task_name, e.instance_id) for e in remaining] == [("other-unknown", "later")]

    # the name is forgotten: a new row of it is discovered (and aged) afresh
    other_node.schedule(TaskInstance("unknown-task", "again"), clock.now())
    scheduler.run_any_due_executions()
    assert recorder.count(SchedulerEventType.UNRESOLVED_TASK) == 3


def test_delete_unresolved_after_is_configurable(engine, built, dialect):
    clock = SettableClock(MARCH_1)
    scheduler = (
        Scheduler.create(engine)
        .clock(clock)
        .scheduler_name("manual")
        .delete_unresolved_after(timedelta(hours=1))
        .build()
    )
    built.append(scheduler)
    scheduler.schedule(TaskInstance("unknown-task", "1"), MARCH_1)
    scheduler.run_any_due_executions()
    clock.set(MARCH_1 + timedelta(hours=1))
    scheduler.run_dead_execution_detection()
    assert len(scheduler.get_scheduled_executions()) == 1
    clock.set(MARCH_1 + timedelta(hours=1, milliseconds=1))
    scheduler.run_dead_execution_detection()
    assert scheduler.get_scheduled_executions() == []


# --------------------------------------------------------------------------- pause / resume
def test_pause_stops_polling_and_resume_restarts_it(make, dialect):
    recorder = EventRecorder()
    entered, release = threading.Event(), threading.Event()

    def handler(instance, ctx):
        if instance.id == "slow":
            entered.set()
            assert release.wait(10)

    task = Tasks.one_time("pausable").execute(handler)
    with make(task, recorder=recorder) as scheduler:
        wait_until(lambda: polled(recorder), 5, message="first poll")
        scheduler.schedule(task.instance("slow"))
        assert entered.wait(5)

        scheduler.pause()
        assert scheduler.is_paused
        # a poll already under way when pause() was called may finish; then the poller waits
        wait_until(lambda: scheduler.waiter._waiting, 5, message="the poller to wait")
        polls = recorder.count(SchedulerEventType.RAN_EXECUTE_DUE)
        scheduler.schedule(task.instance("fast"))  # due now: wakes the poller, which must not poll
        release.set()  # the running execution finishes while paused
        wait_until(lambda: len(recorder.completed) == 1, 5, message="the running execution completes")
        time.sleep(0.5)  # a bounded negative check
        assert [c.execution.instance_id for c in recorder.completed] == ["slow"]
        assert recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) == polls
        assert scheduler.get_scheduled_execution(("pausable", "fast")) is not None

        scheduler.resume()
        assert not scheduler.is_paused
        # resume() polls at once rather than at the next interval, a minute away
        wait_until(
            lambda: len(recorder.completed) == 2, INSIDE_THE_INTERVAL, message="execution after resume"
        )
    assert [c.execution.instance_id for c in recorder.successes()] == ["slow", "fast"]
    no_failures(recorder)


def test_last_successful_poll_is_when_the_poller_last_polled(make, dialect):
    recorder = EventRecorder()
    scheduler = make(Tasks.one_time("polled").execute(noop), recorder=recorder)
    assert scheduler.last_successful_poll is None  # not started: never polled
    with scheduler:
        wait_until(lambda: scheduler.last_successful_poll is not None, 5, message="the first poll")
        first = scheduler.last_successful_poll
        assert first <= scheduler.clock.now()
        polls = recorder.count(SchedulerEventType.RAN_EXECUTE_DUE)
        scheduler.trigger_check_for_due_executions()
        wait_until(lambda: polled(recorder, polls + 1), 5, message="a second poll")
        wait_until(lambda: scheduler.last_successful_poll > first, 5, message="the time of the second poll")


# --------------------------------------------------------------------------- SQLite connection set-up
@pytest.mark.dialects("sqlite")
def test_sqlite_poll_works_while_another_connection_holds_the_write_lock(engine, database, dialect):
    """A fresh file is not in WAL mode yet: switching it needs the whole file, and a
    connection set up while another one writes (e.g. two scheduler threads or processes
    opening their first connections together) must still be able to poll."""
    path = engine.url.database
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        assert writer.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        writer.execute("BEGIN IMMEDIATE")
        task = Tasks.one_time("t").execute(noop)
        scheduler = Scheduler.create(engine, task).scheduler_name("manual").build()
        assert scheduler.run_any_due_executions() == 0
        assert scheduler.get_scheduled_executions() == []
    finally:
        writer.execute("ROLLBACK")
        writer.close()

    SchedulerClient(database.engine()).get_scheduled_executions()  # a later connection switches
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        check.close()
