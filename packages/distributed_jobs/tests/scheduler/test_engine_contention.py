"""Fetch mode under contention: instances whose claims keep losing spread out (contention.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ekbatan.distributed_jobs.scheduler import Scheduler, SystemClock, Tasks
from ekbatan.distributed_jobs.scheduler._observability import Listeners
from ekbatan.distributed_jobs.scheduler._polling.contention import MAX_SPREAD, ClaimContention
from ekbatan.distributed_jobs.scheduler._polling.poller import FetchStrategy
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect


def record(contention: ClaimContention, won: int, lost: int) -> None:
    for _ in range(won):
        contention.record(won=True)
    for _ in range(lost):
        contention.record(won=False)


def test_a_lone_instance_that_never_loses_keeps_the_plain_window():
    contention = ClaimContention()
    for _ in range(5):
        record(contention, won=30, lost=0)
        assert contention.window(30) == 30


def test_losing_claims_widens_the_window_up_to_the_cap_and_winning_narrows_it():
    contention = ClaimContention()
    widths = []
    for _ in range(5):
        record(contention, won=10, lost=20)
        widths.append(contention.window(30))
    assert widths == [60, 120, 240, 240, 240]
    assert contention.spread == MAX_SPREAD
    # a share between the two thresholds (here 10 %) holds the width where it is
    record(contention, won=9, lost=1)
    assert contention.window(30) == 240
    narrowing = []
    for _ in range(4):
        record(contention, won=30, lost=0)
        narrowing.append(contention.window(30))
    assert narrowing == [120, 60, 30, 30]


def test_too_few_claims_say_nothing_and_are_kept_for_the_next_poll():
    contention = ClaimContention()
    record(contention, won=0, lost=3)
    assert contention.window(10) == 10  # 3 claims: not enough to judge
    record(contention, won=0, lost=1)
    assert contention.window(10) == 20  # the same 3 plus 1 more: 4 lost of 4


def test_disabled_contention_never_widens():
    contention = ClaimContention(enabled=False)
    record(contention, won=0, lost=100)
    assert contention.window(10) == 10


def test_choose_keeps_due_order_and_takes_everything_when_the_window_is_short():
    contention = ClaimContention(rng=random.Random(7))
    rows = list(range(100))
    chosen = contention.choose(rows, 10)
    assert len(chosen) == 10
    assert len(set(chosen)) == 10
    assert chosen == sorted(chosen)
    assert chosen != rows[:10]  # a sample, not the head (seeded: deterministic)
    assert contention.choose(rows[:7], 10) == rows[:7]
    assert contention.choose(rows[:10], 10) == rows[:10]


class _QueueingPool:
    """Stands in for the worker threads only: keeps submitted jobs so the test runs them in order."""

    def __init__(self) -> None:
        self.jobs: list = []

    @property
    def in_queue_or_processing(self) -> int:
        return len(self.jobs)

    def submit(self, job, on_done=None) -> bool:
        self.jobs.append((job, on_done))
        return True

    def drain(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job, on_done in jobs:
            job()
            if on_done is not None:
                on_done()


class _RecordingRunner:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def execute(self, execution) -> None:
        self.ran.append(execution.instance_id)


class _Running:
    is_started = True
    is_shutting_down = False
    is_paused = False


TASK = Tasks.one_time("contended").execute(lambda instance, ctx: None)


def instance_name(i: int) -> str:
    return f"{i:03d}"


def strategy(engine, name: str, seed: int) -> tuple[FetchStrategy, _QueueingPool, _RecordingRunner]:
    repository = TaskRepository(engine, resolve_dialect(engine), TaskResolver([TASK]), picked_by=name)
    pool, runner = _QueueingPool(), _RecordingRunner()
    fetch = FetchStrategy(
        repository,
        runner,  # type: ignore[arg-type]
        pool,  # type: ignore[arg-type]
        SystemClock(),
        _Running(),
        Listeners(),
        lower=0,
        upper=10,
        trigger=lambda: None,
        contention=ClaimContention(rng=random.Random(seed)),
    )
    return fetch, pool, runner


def seed_due_rows(engine, n: int) -> None:
    """``n`` due rows of TASK, named 000, 001, … in due order (one millisecond apart)."""
    base = datetime.now(UTC) - timedelta(hours=1)
    writer = TaskRepository(engine, resolve_dialect(engine), TaskResolver([TASK]), picked_by="writer")
    writer.create_batch(
        [
            NewExecution(TASK.name, instance_name(i), base + timedelta(milliseconds=i), None, None)
            for i in range(n)
        ]
    )


def test_an_instance_that_lost_its_claims_samples_a_wider_window_on_the_real_table(engine, dialect):
    seed_due_rows(engine, 40)
    a, a_pool, a_runner = strategy(engine, "a", seed=1)
    b, b_pool, b_runner = strategy(engine, "b", seed=2)

    # Both read the same ten oldest rows; a claims them all first, b loses every claim.
    assert a.run().fetched == 10
    assert b.run().fetched == 10
    a_pool.drain()
    b_pool.drain()
    assert a_runner.ran == [instance_name(i) for i in range(10)]
    assert b_runner.ran == []

    # b now reads the 20 oldest unpicked rows (10..29) and queues 10 of them, in due order.
    result = b.run()
    assert (result.fetched, result.possibly_more) == (10, True)
    b_pool.drain()
    sampled = [int(i) for i in b_runner.ran]
    assert len(sampled) == 10
    assert sampled == sorted(sampled)
    assert set(sampled) <= set(range(10, 30))
    assert sampled != list(range(10, 20))  # seeded sample: not simply the head

    # a never lost a claim: it keeps reading exactly the head of what is left.
    a.run()
    a_pool.drain()
    left = sorted(set(range(10, 40)) - set(sampled))
    assert [int(i) for i in a_runner.ran[10:]] == left[:10]


def test_two_instances_contending_in_fetch_mode_still_run_everything_once(engine, dialect):
    seed_due_rows(engine, 300)
    a, a_pool, a_runner = strategy(engine, "a", seed=3)
    b, b_pool, b_runner = strategy(engine, "b", seed=4)
    # Interleave polls so both keep contending for the same head: each poll's queue is run only
    # after the other instance has fetched too.
    for _ in range(100):
        a.run()
        b.run()
        a_pool.drain()
        b_pool.drain()
        if len(a_runner.ran) + len(b_runner.ran) == 300:
            break
    ran = a_runner.ran + b_runner.ran
    assert sorted(ran) == [instance_name(i) for i in range(300)]
    assert b.contention.spread > 1  # b kept losing to a at first, so it spread out


def test_a_widened_poll_reports_more_rows_only_when_it_left_some_behind(engine, dialect):
    seed_due_rows(engine, 15)
    fetch, pool, runner = strategy(engine, "wide", seed=5)
    fetch.contention.spread = 2  # as if its claims had been losing: reads up to 20 rows

    # 15 rows come back (fewer than the window of 20), 10 are queued: 5 were left behind
    result = fetch.run()
    assert (result.fetched, result.possibly_more) == (10, True)
    pool.drain()
    # the 5 left over come back, fewer than `upper`: all queued, nothing more to fetch early
    result = fetch.run()
    assert (result.fetched, result.possibly_more) == (5, False)
    pool.drain()
    assert sorted(runner.ran) == [instance_name(i) for i in range(15)]


def test_priority_turns_sampling_off(engine, built, dialect):
    scheduler = (
        Scheduler.create(engine, TASK)
        .enable_priority()
        .poll_using_fetch()
        .polling_interval(timedelta(minutes=1))
        .build()
    )
    built.append(scheduler)
    scheduler.start()
    assert scheduler._poller.strategy.contention.enabled is False
    plain = (
        Scheduler.create(engine, TASK)
        .poll_using_fetch()
        .polling_interval(timedelta(minutes=1))
        .scheduler_name("plain")
        .build()
    )
    built.append(plain)
    plain.start()
    assert plain._poller.strategy.contention.enabled is True
