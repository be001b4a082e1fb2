"""Run again a fixed delay after the previous execution finished."""

from __future__ import annotations

from datetime import datetime, timedelta

from .._clock import ensure_utc
from .base import Schedule


class FixedDelay(Schedule):
    """``next = time_done + delay``; the first execution is immediate (``initial = now``).

    The period between two starts is therefore ``delay`` + run time + polling latency. Not
    deterministic: the slots depend on when executions finish, not on the calendar.

    ``FixedDelay(timedelta(0))`` is allowed (run again as soon as polled); the ``of_*`` factories
    insist on a positive amount, as db-scheduler's do.
    """

    __slots__ = ("_delay",)

    def __init__(self, delay: timedelta) -> None:
        if not isinstance(delay, timedelta):
            raise TypeError(f"delay must be a datetime.timedelta, not {type(delay).__name__}")
        if delay < timedelta(0):
            raise ValueError(f"delay must not be negative, got {delay!r}")
        self._delay = delay

    @staticmethod
    def of_millis(millis: int) -> FixedDelay:
        return FixedDelay(timedelta(milliseconds=_positive(millis, "millis")))

    @staticmethod
    def of_seconds(seconds: int) -> FixedDelay:
        return FixedDelay(timedelta(seconds=_positive(seconds, "seconds")))

    @staticmethod
    def of_minutes(minutes: int) -> FixedDelay:
        return FixedDelay(timedelta(minutes=_positive(minutes, "minutes")))

    @staticmethod
    def of_hours(hours: int) -> FixedDelay:
        return FixedDelay(timedelta(hours=_positive(hours, "hours")))

    @property
    def delay(self) -> timedelta:
        return self._delay

    def next_execution_time(self, time_done: datetime) -> datetime:
        return ensure_utc(time_done) + self._delay

    def initial_execution_time(self, now: datetime) -> datetime:
        return ensure_utc(now)

    @property
    def is_deterministic(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixedDelay):
            return NotImplemented
        return self._delay == other._delay

    def __hash__(self) -> int:
        return hash((FixedDelay, self._delay))

    def __repr__(self) -> str:
        return f"FixedDelay({self._delay!r})"


def _positive(amount: int, unit: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"{unit} must be an int, not {type(amount).__name__}")
    if amount <= 0:
        raise ValueError(f"a fixed delay must be positive, got {amount} {unit}")
    return amount
