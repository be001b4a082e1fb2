"""Where the outbox reads "now": any object with ``now()`` returning an aware datetime."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """The scheduler engine's clocks (``SystemClock``, ``SettableClock``) satisfy this too."""

    def now(self) -> datetime: ...


class UtcClock:
    """The wall clock, in UTC (the default of :class:`ActionExecutor` and ``record_events``)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "UtcClock()"


def utc_now(clock: Clock) -> datetime:
    """``clock.now()`` converted to UTC; a naive datetime is refused rather than guessed."""
    instant = clock.now()
    if not isinstance(instant, datetime):
        raise TypeError(f"{clock!r}.now() returned {type(instant).__name__}; expected an aware datetime")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(
            f"{clock!r}.now() returned the naive datetime {instant.isoformat()}; "
            "return an aware one, e.g. datetime.now(UTC)"
        )
    return instant.astimezone(UTC)
