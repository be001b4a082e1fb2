"""Rows this process has claimed (lock-and-fetch, or from a notification) but not started yet.

A shutdown gives them back (unpicked, at their version) rather than running them or leaving
them picked until another instance finds them dead.

They are picked in the table, so they must heartbeat like running executions: a queue that
waits longer than the dead threshold would otherwise see its rows revived — and run — elsewhere,
and then run them a second time here. A claim whose heartbeat finds the row changed is marked
lost, and the worker that dequeues it skips it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._observability import CandidateEventType, Listeners

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRunner

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.claims")


class QueuedClaims:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[int, Execution] = {}
        self._lost: set[int] = set()
        self._released: set[int] = set()
        self._tokens = itertools.count()

    def add(self, execution: Execution) -> int:
        token = next(self._tokens)
        with self._lock:
            self._claims[token] = execution
        return token

    def take(self, token: int) -> Execution | None:
        """Hand the claim to its worker; None when it was lost while queued or given back."""
        with self._lock:
            return self._take(token)

    def _take(self, token: int) -> Execution | None:
        execution = self._claims.pop(token, None)
        if token in self._lost:
            self._lost.discard(token)
            return None
        return execution

    def job(
        self,
        token: int,
        runner: ExecutionRunner,
        listeners: Listeners,
        timed: Callable[[float], None] | None = None,
    ) -> Callable[[], None]:
        """The worker's job for a queued claim: run it, unless it was lost while it waited.
        ``timed`` gets the seconds a run took; a claim skipped (given back, lost) is no run and
        would teach claim sizing that executions take no time."""
        with self._lock:
            queued = self._claims.get(token)

        def run() -> None:
            with self._lock:  # one block: a give-back between the two checks is no lost claim
                if token in self._released:
                    self._released.discard(token)
                    return  # given back at shutdown
                claimed = self._take(token)
            if claimed is None:
                log.warning("claim of %s was lost while it waited in the queue; not running it here", queued)
                listeners.on_candidate_event(CandidateEventType.STALE)
                return
            started = time.monotonic()
            runner.execute(claimed)
            if timed is not None:
                timed(time.monotonic() - started)

        return run

    def release_all(self) -> list[Execution]:
        """Take every claim not started yet away from its worker (which then skips it): the
        shutdown gives these rows back instead of running them."""
        with self._lock:
            released = [e for token, e in self._claims.items() if token not in self._lost]
            self._released.update(self._claims)
            self._released -= self._lost
            self._claims.clear()
            return released

    def snapshot(self) -> list[tuple[int, Execution]]:
        with self._lock:
            return list(self._claims.items())

    def mark_lost(self, token: int) -> None:
        with self._lock:
            if token in self._claims:
                self._lost.add(token)

    def __len__(self) -> int:
        return len(self._claims)
