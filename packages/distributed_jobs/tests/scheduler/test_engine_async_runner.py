"""``AsyncRunner``: the scheduler's own event loop for ``async def`` task bodies — started on
first use on one named daemon thread, results and errors handed back to the worker thread,
every running coroutine reachable by the shutdown's cancel, and stopped cleanly."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from testsupport import wait_until

DEADLINE = 30.0


@pytest.fixture
def runner():
    made = AsyncRunner(name="test-asyncio")
    yield made
    made.stop()


def loop_threads(name: str = "test-asyncio") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_no_loop_and_no_thread_until_first_used(runner):
    assert loop_threads() == []

    async def answer() -> int:
        return 42

    assert runner.run(answer()) == 42
    [thread] = loop_threads()
    assert thread.daemon


def test_every_coroutine_runs_on_the_one_loop_thread(runner):
    async def where() -> tuple[str, int]:
        return threading.current_thread().name, id(asyncio.get_running_loop())

    seen = {runner.run(where()) for _ in range(3)}
    seen |= {f.result(DEADLINE) for f in [runner.submit(where()) for _ in range(3)]}
    assert len(seen) == 1
    [(thread_name, _)] = seen
    assert thread_name == "test-asyncio"


def test_an_exception_reaches_the_calling_thread(runner):
    async def fails() -> None:
        raise ValueError("bad input 7")

    with pytest.raises(ValueError, match="bad input 7"):
        runner.run(fails())


def test_coroutines_on_the_loop_run_concurrently(runner):
    async def meet(barrier: asyncio.Event, other: asyncio.Event) -> str:
        barrier.set()
        await asyncio.wait_for(other.wait(), DEADLINE)  # only returns if the other one runs meanwhile
        return "met"

    async def events() -> tuple[asyncio.Event, asyncio.Event]:
        return asyncio.Event(), asyncio.Event()

    a, b = runner.run(events())
    first, second = runner.submit(meet(a, b)), runner.submit(meet(b, a))
    assert (first.result(DEADLINE), second.result(DEADLINE)) == ("met", "met")


def test_cancel_all_cancels_what_runs_and_counts_it(runner):
    entered = threading.Event()
    cancelled = threading.Event()

    async def forever() -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    future = runner.submit(forever())
    assert entered.wait(DEADLINE)
    assert runner.cancel_all() == 1
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(DEADLINE)
    assert cancelled.wait(DEADLINE)  # the coroutine itself saw the cancellation
    wait_until(lambda: runner.cancel_all() == 0, DEADLINE, message="finished coroutines are forgotten")


def test_finished_coroutines_are_not_cancelled_later(runner):
    async def quick() -> str:
        return "done"

    future = runner.submit(quick())
    assert future.result(DEADLINE) == "done"
    wait_until(lambda: runner.cancel_all() == 0, DEADLINE, message="nothing left running")
    assert not future.cancelled()


def test_stop_ends_the_loop_thread_and_a_later_use_starts_a_new_one(runner):
    async def thread_ident() -> int:
        return threading.get_ident()

    assert runner.run(thread_ident()) == next(t.ident for t in loop_threads())
    [thread] = loop_threads()
    runner.stop()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    assert loop_threads() == []
    runner.stop()  # stopping twice, or a runner never used, is harmless
    AsyncRunner().stop()
    assert runner.run(thread_ident()) != 0
    [new_thread] = loop_threads()
    assert new_thread is not thread and new_thread.is_alive()
