"""Run at the local wall-clock times matched by a cron pattern."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from .._clock import ensure_utc
from ._cron_expression import CronExpression, CronSyntaxError
from ._zones import gap_end, resolve_zone, scan_start, wall_of, wall_to_utc, zone_key
from .base import NEVER, Schedule
from .disabled import DisabledScheduleError

logger = logging.getLogger(__name__)

DISABLED_PATTERN = "-"
_MICROSECOND = timedelta(microseconds=1)


class CronSchedule(Schedule):
    """The times matched by a cron ``pattern``, read as wall-clock times in ``zone`` (default ``"UTC"``).

    Six fields are Spring 5.3 style with seconds first (``"0 0 12 * * ?"``), five fields are classic
    Unix cron (``"0 12 * * *"``); see :mod:`._cron_expression` for the syntax and docs/schedules.md
    for the day-of-month/day-of-week rule each one uses. An invalid pattern raises ``ValueError`` here,
    at construction. The pattern ``"-"`` makes a disabled schedule (``is_disabled`` is True and asking
    it for a time raises :class:`DisabledScheduleError`).

    ``next_execution_time(done)`` is the earliest matching instant strictly after ``done``. Across
    daylight-saving transitions each matching wall time happens once: a time inside the spring-forward
    gap is shifted forward by the gap's length; a time that occurs twice in the fall-back overlap runs
    at the earlier (summer-time) offset only. A pattern that can never match (``"0 0 0 30 2 ?"``)
    yields :data:`NEVER` and logs an error.

    db-scheduler defaults the zone to the JVM's default zone; here the default is UTC, always.
    """

    __slots__ = ("_expression", "_never", "_pattern", "_zone")

    def __init__(self, pattern: str, zone: str | ZoneInfo = "UTC") -> None:
        if not isinstance(pattern, str):
            raise TypeError(f"a cron pattern must be a str, not {type(pattern).__name__}")
        normalized = " ".join(pattern.split())
        if not normalized:
            raise CronSyntaxError(
                f"invalid cron pattern {pattern!r}: it is empty; use '-' for a disabled schedule"
            )
        self._zone = resolve_zone(zone)
        self._pattern = normalized
        self._expression = None if normalized == DISABLED_PATTERN else CronExpression(normalized)
        self._never = False

    @property
    def pattern(self) -> str:
        """The pattern with its whitespace normalised to single spaces."""
        return self._pattern

    @property
    def zone(self) -> ZoneInfo:
        return self._zone

    @property
    def is_disabled(self) -> bool:
        return self._expression is None

    @property
    def is_deterministic(self) -> bool:
        return True

    def next_execution_time(self, time_done: datetime) -> datetime:
        done = ensure_utc(time_done)
        expression = self._expression
        if expression is None:
            raise DisabledScheduleError(
                f"cron schedule {self._pattern!r} is disabled and has no execution times; check is_disabled"
            )
        if not self._never:
            best: datetime | None = None
            stop: datetime | None = None
            # Wall times come in order, and so do their instants, except that a wall time in a
            # spring-forward gap maps (shifted forward) to a later instant than some real wall
            # times after the gap. So keep the earliest instant after `done` until no later wall
            # time can beat it: none beyond the wall clock at the best instant (`stop`).
            walls = expression.walls_after(scan_start(done, self._zone))
            while (wall := next(walls, None)) is not None:
                if stop is not None and wall > stop:
                    break
                instant = wall_to_utc(wall, self._zone)
                if instant <= done or (best is not None and instant >= best):
                    continue
                best, stop = instant, wall_of(instant, self._zone)
                if stop != wall:
                    # `wall` is in a gap: the rest of the gap maps to still later instants, so
                    # continue with the real wall times from the end of the gap up to `stop`.
                    walls = expression.walls_after(gap_end(wall, stop, self._zone) - _MICROSECOND)
            if best is not None:
                return best
            if done.year < 9000:  # the whole 400-year calendar cycle was scanned: it never matches
                self._never = True
        logger.error(
            "cron pattern %r (zone %s) has no matching time after %s; returning NEVER (%s)",
            self._pattern,
            zone_key(self._zone),
            done.isoformat(),
            NEVER.isoformat(),
        )
        return NEVER

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CronSchedule):
            return NotImplemented
        return self._pattern == other._pattern and zone_key(self._zone) == zone_key(other._zone)

    def __hash__(self) -> int:
        return hash((CronSchedule, self._pattern, zone_key(self._zone)))

    def __repr__(self) -> str:
        return f"CronSchedule({self._pattern!r}, zone={zone_key(self._zone)!r})"
