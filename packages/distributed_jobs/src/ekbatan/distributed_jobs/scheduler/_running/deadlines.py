"""The deadlines of running thread bodies: one thread that calls each run's ``expired``
callback when its task's timeout has passed, unless the run ended first.

A thread cannot be stopped from outside in Python, so a thread body past its timeout is not
killed: its run is recorded as failed at the deadline, and what it does after that is
discarded (see :class:`~ekbatan.distributed_jobs.scheduler._running.runner.ExecutionRunner`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from datetime import datetime

from ekbatan.distributed_jobs.scheduler._clock import Clock

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.execution")

#: seconds between looks at the clock at most: the scheduler's clock is injectable (a test may
#: move it), so the watch does not trust one long sleep
LONGEST_WAIT = 0.1

#: below this many entries the heap is not worth compacting
COMPACT_ABOVE = 64


class Outcome:
    """Who records a run's result: its body's return, or its deadline. The first to claim it."""

    __slots__ = ("_claimed", "_lock", "awaiting", "recorded")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed = False
        #: the body is a coroutine being awaited until the deadline: it is cancelled there and
        #: its worker records the timeout itself, so the watch leaves it alone
        self.awaiting = False
        #: set once the deadline's side has recorded the run (the body's side waits for it, so
        #: that a worker is free only once its run is written)
        self.recorded = threading.Event()

    def claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True


class DeadlineWatch:
    def __init__(self, clock: Clock, name: str = "ekbatan-deadlines") -> None:
        self._clock = clock
        self._name = name
        self._condition = threading.Condition()
        # The heap holds (deadline, token) only; the callbacks (which hold the run's execution,
        # data and context) live in a dict a cancel drops them from at once, so a run that ended
        # long before its deadline keeps nothing alive but a small tuple until it is compacted.
        self._heap: list[tuple[datetime, int]] = []
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, deadline: datetime, expired: Callable[[], None]) -> Callable[[], None]:
        """Call ``expired`` on the watch's thread at ``deadline``; returns what cancels that."""
        token = next(self._tokens)
        with self._condition:
            heapq.heappush(self._heap, (deadline, token))
            self._callbacks[token] = expired
            if self._thread is None and not self._stopped:
                # started on first use: a scheduler whose tasks have no timeout has no such thread
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._condition.notify()

        def cancel() -> None:
            with self._condition:
                self._callbacks.pop(token, None)  # a no-op once it has fired
                # Most runs end long before their deadline: with a long timeout and many runs
                # the heap would fill with ended ones. Rebuilt when most of it is stale, so each
                # entry is copied O(1) times on average.
                if len(self._heap) > COMPACT_ABOVE and len(self._heap) > 2 * len(self._callbacks):
                    self._heap = [entry for entry in self._heap if entry[1] in self._callbacks]
                    heapq.heapify(self._heap)

        return cancel

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _due(self) -> list[Callable[[], None]]:
        """Wait for the next deadline to pass; the callbacks due (empty when stopped)."""
        with self._condition:
            while not self._stopped:
                while self._heap and self._heap[0][1] not in self._callbacks:
                    heapq.heappop(self._heap)  # cancelled
                if self._heap:
                    wait = (self._heap[0][0] - self._clock.now()).total_seconds()
                    if wait <= 0:
                        due = []
                        now = self._clock.now()
                        while self._heap and self._heap[0][0] <= now:
                            _, token = heapq.heappop(self._heap)
                            expired = self._callbacks.pop(token, None)
                            if expired is not None:
                                due.append(expired)
                        return due
                    self._condition.wait(min(wait, LONGEST_WAIT))
                else:
                    self._condition.wait()
            return []

    def _run(self) -> None:
        while not self._stopped:
            for expired in self._due():
                try:
                    expired()
                except Exception:
                    log.exception("recording a run past its timeout failed")
