"""A background thread running one step repeatedly until told to stop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    DEFAULT_OUTAGE_POLICY,
    FailureLog,
    OutagePolicy,
)
from ekbatan.distributed_jobs.scheduler._polling.waiter import Waiter

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.background")


class RepeatingLoop:
    """Runs ``step`` now and then every ``interval()`` seconds; a failing step is logged (a streak
    of failures once, then summarized: :class:`FailureLog`), reported through ``on_error``, and
    the loop carries on."""

    def __init__(
        self,
        name: str,
        step: Callable[[], None],
        interval: Callable[[], float],
        on_error: Callable[[BaseException], None] | None = None,
        *,
        what: str | None = None,
        outage: OutagePolicy = DEFAULT_OUTAGE_POLICY,
    ) -> None:
        self.name = name
        self._step = step
        self._interval = interval
        self._on_error = on_error
        self.waiter = Waiter()
        self.failures = FailureLog(what or name, log, policy=outage)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._step()
                self.failures.succeeded()
            except Exception as exc:
                self.failures.failed(exc)
                if self._on_error is not None:
                    self._on_error(exc)
            if self._stopping.is_set():
                break
            self.waiter.wait(self._interval())

    def stop(self, timeout: float = 5.0) -> bool:
        self._stopping.set()
        self.waiter.wake_or_skip_next_wait()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()


def liveness_loops(
    heartbeats: Callable[[], None],
    dead_executions: Callable[[], None],
    heartbeat_interval: timedelta,
    on_error: Callable[[BaseException], None],
    outage: OutagePolicy,
) -> tuple[RepeatingLoop, RepeatingLoop]:
    """The two loops keeping executions alive, started: heartbeats every heartbeat interval,
    and the search for dead executions every two."""
    every = heartbeat_interval.total_seconds()
    loops = (
        RepeatingLoop(
            "ekbatan-heartbeat", heartbeats, lambda: every, on_error, what="heartbeats", outage=outage
        ),
        RepeatingLoop(
            "ekbatan-dead-executions",
            dead_executions,
            lambda: 2 * every,
            on_error,
            what="detecting dead executions",
            outage=outage,
        ),
    )
    for loop in loops:
        loop.start()
    return loops
