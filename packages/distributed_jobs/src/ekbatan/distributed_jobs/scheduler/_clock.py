"""Time, injectable: the engine reads "now" only through a :class:`Clock`.

Every timestamp the engine writes comes from the application's clock, never from the
database's ``NOW()``, as db-scheduler's protocol has it. Tests inject a :class:`SettableClock` and step
it instead of sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant as an aware UTC ``datetime``."""
        ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class SettableClock:
    """A clock that only moves when told to; thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = ensure_utc(start) if start is not None else datetime.now(UTC)

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = ensure_utc(instant)

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now = self._now + delta
            return self._now

    def __repr__(self) -> str:
        return f"SettableClock({self.now().isoformat()})"


def ensure_utc(instant: datetime) -> datetime:
    """Return ``instant`` as an aware UTC datetime; naive datetimes are refused, not guessed."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(
            f"naive datetime {instant.isoformat()} has no time zone; pass an aware datetime, "
            "e.g. datetime.now(timezone.utc) or dt.replace(tzinfo=timezone.utc)"
        )
    return instant.astimezone(UTC)
