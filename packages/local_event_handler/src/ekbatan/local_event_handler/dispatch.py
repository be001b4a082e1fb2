"""Calling handlers in parallel: plain ``handle`` methods on threads, ``async def`` ones on an
event loop of their own, so neither kind waits for the other.

Every call ends in an :class:`Invocation` — succeeded, or failed with the exception — whatever
the handler does: raises anything at all, hangs past the timeout, or returns a coroutine from a
plain method. One bad call never costs the other calls of the round their outcome.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ekbatan.distributed_jobs.scheduler import AsyncRunner

log = logging.getLogger("ekbatan.local_event_handler")


#: how often the wait looks at calls still queued for a thread, when a timeout applies
_QUEUED_CHECK = 0.05


class HandlerTimeoutError(TimeoutError):
    """A handler ran longer than the job's ``handler_timeout``; recorded as a failed try."""


@dataclass(slots=True)
class Invocation:
    """The outcome of one handler call: ``error`` is None when it returned normally."""

    error: BaseException | None = None
    seconds: float = 0.0
    #: monotonic time the call started; None while it waits for a thread
    started: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.error is None


def _collect(future: concurrent.futures.Future[Any], outcome: Invocation) -> None:
    if future.cancelled():
        outcome.error = outcome.error or concurrent.futures.CancelledError("the handler was cancelled")
    elif outcome.error is None and future.exception() is not None:
        outcome.error = future.exception()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class HandlerDispatcher:
    """Runs a round's handler calls concurrently and waits for all of them.

    Threads are made as calls need them, up to ``max_threads``, and kept between rounds. With a
    ``timeout``, a call still running that long after it *started* is recorded as failed. An
    ``async def`` call is cancelled; a plain method cannot be stopped, so its thread is left to
    finish on its own and the pool is replaced: calls still waiting for a thread move to the
    new pool, so hung handlers never starve the calls behind them.
    """

    def __init__(self, *, max_threads: int, timeout: timedelta | None, name: str) -> None:
        self._max_threads = max_threads
        self._timeout = None if timeout is None else timeout.total_seconds()
        self._name = name
        self._lock = threading.Lock()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop = AsyncRunner(f"{name}-asyncio")

    def run_all(self, calls: Sequence[tuple[Callable[[Any], Any], Any]]) -> list[Invocation]:
        """Call each ``handle(envelope)`` of ``calls``; the outcomes come back in the same order."""
        outcomes = [Invocation() for _ in calls]
        pending: dict[concurrent.futures.Future[Any], int] = {}
        for index, (handle, envelope) in enumerate(calls):
            try:
                pending[self._start(handle, envelope, outcomes[index])] = index
            except BaseException as error:  # the pool refused the call (shut down): this row fails alone
                outcomes[index].error = error
        if self._timeout is None:
            concurrent.futures.wait(pending)
            for future, index in pending.items():
                _collect(future, outcomes[index])
            return outcomes
        while pending:
            done, _ = concurrent.futures.wait(
                pending,
                timeout=self._next_deadline(pending, outcomes),
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            for future in done:
                _collect(future, outcomes[pending.pop(future)])
            self._expire(pending, outcomes, calls)
        return outcomes

    def _next_deadline(
        self, pending: dict[concurrent.futures.Future[Any], int], outcomes: list[Invocation]
    ) -> float:
        assert self._timeout is not None
        now = time.monotonic()
        started = [s for i in pending.values() if (s := outcomes[i].started) is not None]
        if len(started) < len(pending):
            return _QUEUED_CHECK  # a queued call starts at an unknown time: look again soon
        return max(0.0, min(started) + self._timeout - now)

    def _expire(
        self,
        pending: dict[concurrent.futures.Future[Any], int],
        outcomes: list[Invocation],
        calls: Sequence[tuple[Callable[[Any], Any], Any]],
    ) -> None:
        assert self._timeout is not None
        now = time.monotonic()
        abandoned_thread = False
        for future, index in list(pending.items()):
            outcome = outcomes[index]
            if outcome.started is None or now - outcome.started < self._timeout:
                continue
            del pending[future]
            future.cancel()
            outcome.error = HandlerTimeoutError(
                f"the handler did not finish within {self._timeout:g} s (handler_timeout)"
            )
            abandoned_thread |= not inspect.iscoroutinefunction(calls[index][0])
        if abandoned_thread:
            self._replace_pool(pending, outcomes, calls)

    def _replace_pool(
        self,
        pending: dict[concurrent.futures.Future[Any], int],
        outcomes: list[Invocation],
        calls: Sequence[tuple[Callable[[Any], Any], Any]],
    ) -> None:
        with self._lock:
            retired, self._threads = self._threads, None
        if retired is not None:
            retired.shutdown(wait=False)
        log.warning("a handler timed out and keeps its thread; later calls go to a new thread pool")
        for future, index in list(pending.items()):
            if future.cancel():  # still waiting for a thread of the retired pool
                del pending[future]
                handle, envelope = calls[index]
                pending[self._start(handle, envelope, outcomes[index])] = index

    def _start(
        self, handle: Callable[[Any], Any], envelope: Any, outcome: Invocation
    ) -> concurrent.futures.Future[Any]:
        if inspect.iscoroutinefunction(handle):
            return self._loop.submit(_timed_async(handle, envelope, outcome))
        return self._pool().submit(self._timed_sync, handle, envelope, outcome)

    def _timed_sync(self, handle: Callable[[Any], Any], envelope: Any, outcome: Invocation) -> None:
        started = outcome.started = time.monotonic()
        try:
            result = handle(envelope)
            if inspect.isawaitable(result):
                # a plain method that returned a coroutine: run it to completion on the loop
                self._loop.submit(_awaited(result)).result(self._timeout)
        except BaseException as error:  # a handler's failure is its row's outcome, whatever it is
            outcome.error = error
        finally:
            outcome.seconds = time.monotonic() - started

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._max_threads, thread_name_prefix=self._name
                )
            return self._threads

    def close(self) -> None:
        """Stop the threads and the loop; calls still running finish on their own."""
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)
        self._loop.stop()


async def _timed_async(handle: Callable[[Any], Any], envelope: Any, outcome: Invocation) -> None:
    started = outcome.started = time.monotonic()
    try:
        await handle(envelope)
    except BaseException as error:
        outcome.error = error
        if isinstance(error, asyncio.CancelledError):
            raise
    finally:
        outcome.seconds = time.monotonic() - started
