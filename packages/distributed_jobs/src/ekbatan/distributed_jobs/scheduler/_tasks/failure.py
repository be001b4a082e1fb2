"""What to do with an execution whose handler raised.

Every delay counts from ``complete.time_done`` — the moment the handler failed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from ekbatan.distributed_jobs.scheduler._execution import ExecutionComplete
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations
from ekbatan.distributed_jobs.scheduler.schedules import Schedule

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.failure")

DEFAULT_RETRY_INTERVAL = timedelta(minutes=5)


@runtime_checkable
class FailureHandler(Protocol):
    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None: ...


class OnFailureRetryLater:
    """Run again ``delay`` after the failure (default for one-time and custom tasks: 5 min)."""

    def __init__(self, delay: timedelta = DEFAULT_RETRY_INTERVAL) -> None:
        if delay < timedelta(0):
            raise ValueError(f"retry delay must not be negative, got {delay}")
        self.delay = delay

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        ops.reschedule(complete, complete.time_done + self.delay)

    def __repr__(self) -> str:
        return f"OnFailureRetryLater({self.delay})"


class OnFailureReschedule:
    """Wait for the schedule's next slot (default for recurring tasks)."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        ops.reschedule(complete, self.schedule.next_execution_time(complete.time_done))


class OnFailureRescheduleUsingTaskDataSchedule:
    """As :class:`OnFailureReschedule`, with the schedule stored in the task's data."""

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        # task data is whatever the task's data type says: Any, as it was serialized
        stored: Any = complete.instance.data if complete.instance is not None else None
        schedule = stored.schedule
        ops.reschedule(complete, schedule.next_execution_time(complete.time_done))


class ExponentialBackoff:
    """Wait ``initial × rate^failures_so_far`` after the failure, optionally capped.

    The first failure waits ``initial``, the second ``initial × rate``, and so on.
    """

    def __init__(self, initial: timedelta, rate: float = 1.5, max_delay: timedelta | None = None) -> None:
        if initial <= timedelta(0):
            raise ValueError(f"initial backoff must be positive, got {initial}")
        if rate < 1.0:
            raise ValueError(f"backoff rate must be at least 1.0, got {rate}")
        self.initial = initial
        self.rate = rate
        self.max_delay = max_delay

    def delay_for(self, failures_before: int) -> timedelta:
        # half up, as Java's Math.round (Python's round() would send 45 562.5 ms to 45 562)
        millis = math.floor(self.initial / timedelta(milliseconds=1) * self.rate**failures_before + 0.5)
        delay = timedelta(milliseconds=millis)
        return min(delay, self.max_delay) if self.max_delay is not None else delay

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        delay = self.delay_for(complete.execution.consecutive_failures)
        ops.reschedule(complete, complete.time_done + delay)

    def __repr__(self) -> str:
        return f"ExponentialBackoff({self.initial}, rate={self.rate}, max_delay={self.max_delay})"


class OnFailureDeadLetter:
    """Keep the execution as *dead* — out of the schedule, not deleted — with its last error:
    ``ekbatan tasks list --dead`` shows it, ``tasks retry`` sends it back, ``tasks cancel``
    drops it. Used after retries run out (``max_retries(n)....then_dead_letter()``)."""

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        log.warning(
            "execution %s failed %d time(s) in a row; keeping it as dead (retry it with "
            "`ekbatan tasks retry %s %s`)",
            complete.execution,
            complete.execution.consecutive_failures + 1,
            complete.execution.task_name,
            complete.execution.instance_id,
        )
        ops.dead_letter(complete)

    def __repr__(self) -> str:
        return "OnFailureDeadLetter()"


MaxRetriesExceededListener = Callable[[ExecutionComplete, ExecutionOperations], None]


class MaxRetries:
    """Delegate up to ``max_retries`` retries, then run ``on_exceeded`` (default: remove).

    Attempts in total = 1 + ``max_retries``; the row is removed on the failure after that.
    """

    def __init__(
        self,
        max_retries: int,
        delegate: FailureHandler,
        on_exceeded: FailureHandler | None = None,
        listener: MaxRetriesExceededListener | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.max_retries = max_retries
        self.delegate = delegate
        self.on_exceeded = on_exceeded
        self.listener = listener

    def on_failure(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        attempts = complete.execution.consecutive_failures + 1
        if attempts <= self.max_retries:
            self.delegate.on_failure(complete, ops)
            return
        if self.on_exceeded is None:
            log.warning(
                "execution %s failed %d times, more than max retries %d; removing it",
                complete.execution,
                attempts,
                self.max_retries,
            )
            ops.remove()
        else:
            self.on_exceeded.on_failure(complete, ops)
        if self.listener is not None:
            self.listener(complete, ops)


class _MaxRetriesBuilder:
    def __init__(self, max_retries: int) -> None:
        self._max_retries = max_retries
        self._retry: FailureHandler | None = None

    def with_backoff(
        self, initial: timedelta, rate: float = 1.5, max_delay: timedelta | None = None
    ) -> _MaxRetriesBuilder:
        self._retry = ExponentialBackoff(initial, rate, max_delay)
        return self

    def retry_every(self, delay: timedelta) -> _MaxRetriesBuilder:
        self._retry = OnFailureRetryLater(delay)
        return self

    def _delegate(self) -> FailureHandler:
        if self._retry is None:
            raise ValueError(
                "no retry behavior chosen: call .retry_every(delay) or .with_backoff(initial) before "
                ".then_remove() / .then(...)"
            )
        return self._retry

    def then_remove(self, listener: MaxRetriesExceededListener | None = None) -> MaxRetries:
        return MaxRetries(self._max_retries, self._delegate(), None, listener)

    def then_dead_letter(self, listener: MaxRetriesExceededListener | None = None) -> MaxRetries:
        """After the last retry, keep the execution as dead (see :class:`OnFailureDeadLetter`)."""
        return MaxRetries(self._max_retries, self._delegate(), OnFailureDeadLetter(), listener)

    def then(self, handler: FailureHandler, listener: MaxRetriesExceededListener | None = None) -> MaxRetries:
        return MaxRetries(self._max_retries, self._delegate(), handler, listener)


class FailureHandlers:
    """Fluent construction: ``FailureHandlers.max_retries(3).with_backoff(timedelta(minutes=1)).then_remove()``."""

    retry_later = OnFailureRetryLater
    dead_letter = OnFailureDeadLetter
    reschedule = OnFailureReschedule
    exponential_backoff = ExponentialBackoff

    @staticmethod
    def max_retries(n: int) -> _MaxRetriesBuilder:
        if n < 0:
            raise ValueError(f"max_retries must be >= 0, got {n}")
        return _MaxRetriesBuilder(n)
