"""``WorkerPool``: the fixed pool of daemon threads that runs executions — what it runs, in
which order, what it counts, and how it drains, drops and closes for the shutdown."""

from __future__ import annotations

import logging
import threading

import pytest

from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from testsupport import wait_until

DEADLINE = 30.0


@pytest.fixture
def pools():
    made: list[WorkerPool] = []
    yield made
    for pool in made:
        pool.close()


def make(pools: list[WorkerPool], threads: int, name: str = "test-worker") -> WorkerPool:
    pool = WorkerPool(threads, name=name)
    pools.append(pool)
    return pool


def test_at_least_one_thread():
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        WorkerPool(0)


def test_daemon_threads_named_after_the_pool(pools):
    make(pools, 2, name="orders")
    named = {t.name: t for t in threading.enumerate() if t.name.startswith("orders-")}
    assert sorted(named) == ["orders-1", "orders-2"]
    assert all(t.daemon for t in named.values())  # an abandoned execution must not keep the process up


def test_one_thread_runs_jobs_in_submission_order_and_calls_on_done_after_each(pools):
    pool = make(pools, 1)
    seen: list[str] = []
    for i in range(5):
        assert pool.submit(lambda i=i: seen.append(f"job {i}"), lambda i=i: seen.append(f"done {i}"))
    assert pool.wait_idle(DEADLINE)
    wait_until(lambda: len(seen) == 10, DEADLINE, message="every on_done")
    assert seen == [entry for i in range(5) for entry in (f"job {i}", f"done {i}")]


def test_counts_what_is_queued_or_running_until_it_is_done(pools):
    pool = make(pools, 1)
    release = threading.Event()
    started = threading.Event()

    def blocking() -> None:
        started.set()
        release.wait(DEADLINE)

    pool.submit(blocking)
    pool.submit(lambda: None)
    assert started.wait(DEADLINE)
    assert pool.in_queue_or_processing == 2  # one running, one waiting behind it
    release.set()
    assert pool.wait_idle(DEADLINE)
    assert pool.in_queue_or_processing == 0


def test_a_failing_job_is_logged_and_the_thread_goes_on(pools, caplog):
    pool = make(pools, 1)
    after: list[str] = []

    def failing() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="ekbatan.distributed_jobs.scheduler.worker_pool"):
        pool.submit(failing, lambda: after.append("on_done of the failed job"))
        pool.submit(lambda: after.append("next job"))
        assert pool.wait_idle(DEADLINE)
        wait_until(lambda: len(after) == 2, DEADLINE)
    assert after == ["on_done of the failed job", "next job"]
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "unexpected error in worker job"
    assert record.exc_info is not None and str(record.exc_info[1]) == "boom"


def test_a_failing_on_done_is_logged_and_the_thread_goes_on(pools, caplog):
    pool = make(pools, 1)
    ran = threading.Event()

    def failing_on_done() -> None:
        raise RuntimeError("after")

    with caplog.at_level(logging.ERROR, logger="ekbatan.distributed_jobs.scheduler.worker_pool"):
        pool.submit(lambda: None, failing_on_done)
        pool.submit(ran.set)
        assert ran.wait(DEADLINE)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "unexpected error after worker job"
    ]


def test_after_stop_accepting_nothing_new_is_taken(pools):
    pool = make(pools, 1)
    ran: list[str] = []
    assert pool.submit(lambda: ran.append("before"))
    pool.stop_accepting()
    assert pool.submit(lambda: ran.append("after")) is False
    assert pool.wait_idle(DEADLINE)
    assert ran == ["before"]
    assert pool.in_queue_or_processing == 0


def test_wait_idle_reports_a_timeout_while_a_job_runs(pools):
    pool = make(pools, 1)
    release, started = threading.Event(), threading.Event()
    pool.submit(lambda: (started.set(), release.wait(DEADLINE)))
    assert started.wait(DEADLINE)
    assert pool.wait_idle(0.05) is False
    assert pool.wait_idle(-1) is False  # a negative wait is no wait, not an error
    release.set()
    assert pool.wait_idle(DEADLINE) is True


def test_discard_queued_drops_only_what_has_not_started(pools):
    pool = make(pools, 1)
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(DEADLINE)
        ran.append("first")

    pool.submit(first)
    for name in ("second", "third"):
        pool.submit(lambda name=name: ran.append(name))
    assert started.wait(DEADLINE)
    assert pool.discard_queued() == 2
    assert pool.in_queue_or_processing == 1  # the running one still counts
    assert pool.discard_queued() == 0
    release.set()
    assert pool.wait_idle(DEADLINE)
    assert ran == ["first"]


def test_close_lets_each_thread_finish_its_current_job_and_exit():
    pool = WorkerPool(2, name="closing")
    release = threading.Event()
    running = threading.Barrier(3)
    finished: list[int] = []

    def job(i: int) -> None:
        running.wait(DEADLINE)
        release.wait(DEADLINE)
        finished.append(i)

    pool.submit(lambda: job(1))
    pool.submit(lambda: job(2))
    running.wait(DEADLINE)  # both threads are inside a job
    pool.close()
    threads = [t for t in threading.enumerate() if t.name.startswith("closing-")]
    assert len(threads) == 2 and all(t.is_alive() for t in threads)  # close() does not interrupt
    release.set()
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(t.is_alive() for t in threads)
    assert sorted(finished) == [1, 2]
