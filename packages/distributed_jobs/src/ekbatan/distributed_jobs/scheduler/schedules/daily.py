"""Run at one or more fixed local times every day."""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from .._clock import ensure_utc
from ._zones import resolve_zone, wall_of, wall_to_utc, zone_key
from .base import NEVER, Schedule

_HH_MM_SS = re.compile(r"([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?", re.ASCII)


class Daily(Schedule):
    """Every day at the given local times in ``zone`` (default ``"UTC"``).

    ``next_execution_time(done)`` is the earliest of those slots strictly after ``done``: one of
    today's remaining times, otherwise tomorrow's first. Times are sorted and de-duplicated, so the
    order they are given in does not matter. Deterministic.

    Daylight-saving transitions (see :mod:`._zones`): a time that falls in the spring-forward gap
    runs the gap's length later (02:30 in Europe/Rome on 2020-03-29 runs at 03:30 CEST); a time that
    occurs twice in the fall-back overlap runs once, at the earlier offset.

    db-scheduler defaults the zone to the JVM's default zone; here the default is UTC, always.
    """

    __slots__ = ("_times", "_zone")

    def __init__(self, *times: time | str, zone: str | ZoneInfo = "UTC") -> None:
        if not times:
            raise ValueError("Daily needs at least one time of day, e.g. Daily('12:00') or Daily(time(12))")
        self._times: tuple[time, ...] = tuple(sorted({to_time_of_day(t) for t in times}))
        self._zone = resolve_zone(zone)

    @property
    def times(self) -> tuple[time, ...]:
        """The local times, ascending, without duplicates."""
        return self._times

    @property
    def zone(self) -> ZoneInfo:
        return self._zone

    def next_execution_time(self, time_done: datetime) -> datetime:
        done = ensure_utc(time_done)
        today = wall_of(done, self._zone).date()
        best: datetime | None = None
        # Yesterday's and tomorrow's slots are candidates too: a gap can shift a slot across
        # midnight and an offset change can make a later wall time an earlier instant. Taking the
        # minimum over a few days keeps every slot (including gap-shifted ones) exactly once.
        for days in (-2, -1, 0, 1, 2):
            try:
                day = today + timedelta(days=days)
            except OverflowError:
                continue
            for t in self._times:
                candidate = wall_to_utc(datetime.combine(day, t), self._zone)
                if candidate > done and (best is None or candidate < best):
                    best = candidate
        return NEVER if best is None else best

    @property
    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Daily):
            return NotImplemented
        return self._times == other._times and zone_key(self._zone) == zone_key(other._zone)

    def __hash__(self) -> int:
        return hash((Daily, self._times, zone_key(self._zone)))

    def __repr__(self) -> str:
        times = ", ".join(repr(format_time_of_day(t)) for t in self._times)
        return f"Daily({times}, zone={zone_key(self._zone)!r})"


def to_time_of_day(value: time | str) -> time:
    """A naive ``time`` from a ``time`` or an ``"HH:MM"`` / ``"HH:MM:SS"`` string (24-hour clock)."""
    if isinstance(value, str):
        return parse_time_of_day(value)
    if isinstance(value, time):
        if value.tzinfo is not None:
            raise ValueError(
                f"daily time {value!r} carries a tzinfo; pass a naive time and give the zone separately"
            )
        return value.replace(fold=0)
    raise TypeError(
        f"a daily time must be a datetime.time or an 'HH:MM' string, not {type(value).__name__}"
        " (pass several times as separate arguments: Daily('08:00', '12:00'))"
    )


def parse_time_of_day(text: str) -> time:
    """Parse ``"HH:MM"`` or ``"HH:MM:SS"`` (two-digit fields, 00:00 to 23:59:59)."""
    match = _HH_MM_SS.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid time of day {text!r}; expected HH:MM or HH:MM:SS, e.g. '12:30'")
    hour, minute = int(match.group(1)), int(match.group(2))
    second = int(match.group(3) or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"invalid time of day {text!r}; hours go 00-23, minutes and seconds 00-59")
    return time(hour, minute, second)


def format_time_of_day(t: time) -> str:
    """``"HH:MM"`` when the seconds are zero, else the full ISO form."""
    if t.second == 0 and t.microsecond == 0:
        return t.strftime("%H:%M")
    return t.isoformat()
