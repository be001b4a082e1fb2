"""What a running handler can see: its execution, its heartbeat health, the scheduler."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._errors import ExecutionTimeoutError
from ekbatan.distributed_jobs.scheduler._execution import Execution

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
    from ekbatan.distributed_jobs.scheduler._instances import TaskInstance

_MS = timedelta(milliseconds=1)


class HeartbeatState:
    """How recently this process managed to tell the table it is still running an execution.

    ``fraction_dead`` is 0.0 right after a successful heartbeat and reaches 1.0 at the moment
    another instance may declare the execution dead and revive it. A handler looping over work
    items can stop early when it rises above ~0.5. Advisory only: the engine never interrupts.
    """

    def __init__(
        self, clock: Clock, started: datetime, heartbeat_interval: timedelta, missed_heartbeats_limit: int
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._interval_ms = heartbeat_interval // _MS
        self._dead_after_ms = (heartbeat_interval * missed_heartbeats_limit) // _MS
        self._tolerance_ms = min(10_000, int(self._interval_ms * 0.25))
        self._last_success = started
        self._last_failure: datetime | None = None
        self._failures_since_success = 0

    def success(self, when: datetime) -> None:
        with self._lock:
            self._last_success = when
            self._failures_since_success = 0

    def failed(self, when: datetime) -> int:
        with self._lock:
            self._last_failure = when
            self._failures_since_success += 1
            return self._failures_since_success

    @property
    def last_success(self) -> datetime:
        return self._last_success

    @property
    def last_failure(self) -> datetime | None:
        return self._last_failure

    @property
    def failed_heartbeats(self) -> int:
        return self._failures_since_success

    @property
    def has_stale_heartbeat(self) -> bool:
        with self._lock:
            if self._failures_since_success > 0:
                return True
            since = (self._clock.now() - self._last_success) // _MS
        return since > self._interval_ms + self._tolerance_ms

    @property
    def fraction_dead(self) -> float:
        since = (self._clock.now() - self._last_success) // _MS
        return since / self._dead_after_ms if self._dead_after_ms > 0 else 0.0

    def __repr__(self) -> str:
        return (
            f"HeartbeatState(fraction_dead={self.fraction_dead:.3f}, "
            f"failed_heartbeats={self.failed_heartbeats}, last_success={self._last_success.isoformat()})"
        )


class CurrentlyExecuting:
    """An execution inside a handler on this process right now."""

    __slots__ = ("_clock", "execution", "heartbeat_state", "instance", "start_time")

    def __init__(
        self,
        execution: Execution,
        instance: TaskInstance[Any] | None,
        clock: Clock,
        heartbeat_state: HeartbeatState,
    ) -> None:
        self.execution = execution
        self.instance = instance
        self._clock = clock
        self.start_time = clock.now()
        self.heartbeat_state = heartbeat_state

    @property
    def duration(self) -> timedelta:
        return self._clock.now() - self.start_time

    def __repr__(self) -> str:
        return f"CurrentlyExecuting({self.execution!s}, since={self.start_time.isoformat()})"


class SchedulerState(Protocol):
    @property
    def is_started(self) -> bool: ...

    @property
    def is_shutting_down(self) -> bool: ...

    @property
    def is_paused(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """Handed to every task handler as its second argument."""

    scheduler_state: SchedulerState
    execution: Execution
    scheduler_client: SchedulerClient
    currently_executing: CurrentlyExecuting
    #: when the task's timeout ends this run (the scheduler's clock, UTC); None: no timeout
    deadline: datetime | None = None
    #: the task's timeout the deadline comes from (None: none)
    timeout: timedelta | None = None
    #: set once the run is past its deadline: a thread body may wait on it as a sleep that ends
    #: early (``ctx.cancellation.wait(5)``)
    cancellation: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def heartbeat_state(self) -> HeartbeatState:
        return self.currently_executing.heartbeat_state

    @property
    def fencing_token(self) -> int:
        """The row's ``version`` while this execution holds it.

        Store it with your own writes and guard them (``… WHERE stored_token <= :token``) so
        that a stalled instance whose execution was revived elsewhere cannot overwrite newer
        results: the revival and the next claim both raise the version. It only grows within
        one row's life — a row deleted and created again starts at 1.
        """
        return self.execution.version

    @property
    def is_shutting_down(self) -> bool:
        return self.scheduler_state.is_shutting_down

    # -- the task's timeout: what a thread body checks (an async body is cancelled instead) --
    @property
    def is_cancelled(self) -> bool:
        """True once this run is past its deadline: stop, the run is (or is about to be) recorded
        as failed. About the timeout only: a stopping scheduler is :attr:`is_shutting_down`."""
        if self.cancellation.is_set():
            return True
        return self.deadline is not None and self.currently_executing._clock.now() >= self.deadline

    def time_left(self) -> timedelta | None:
        """How long until the deadline (zero once past it); None when the task has no timeout."""
        if self.deadline is None:
            return None
        return max(self.deadline - self.currently_executing._clock.now(), timedelta(0))

    def check_cancelled(self) -> None:
        """Raise :class:`ExecutionTimeoutError` once past the deadline; call it between steps
        of long work, so a thread body stops close to its timeout."""
        if self.is_cancelled:
            e = self.execution
            raise ExecutionTimeoutError(e.task_name, e.instance_id, self.timeout)
