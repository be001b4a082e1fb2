"""Schedules: when a recurring task runs next.

* :class:`FixedDelay` — a fixed delay after each execution finishes; first run immediately.
* :class:`FixedRate` — slots a fixed period apart (counted from the Unix epoch), however long runs take.
* :class:`Daily` — fixed local times every day, in a time zone.
* :class:`CronSchedule` — a cron pattern (6-field Spring style or 5-field Unix style), in a time zone.
* :class:`DisabledSchedule` — never runs (also the cron pattern ``"-"`` and the string ``"-"``).

:class:`Schedules` gathers the factories; :func:`parse_schedule` reads the string forms;
:mod:`.persistent` holds schedules stored in task data and their JSON form. Every instant going in or
out is an aware UTC ``datetime``. :class:`MisfirePolicy` says what a recurring task does with
slots that passed without a run. See docs/schedules.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._cron_expression import CronSyntaxError
from .base import NEVER, Schedule
from .cron import CronSchedule
from .daily import Daily
from .disabled import DisabledSchedule, DisabledScheduleError
from .fixed_delay import FixedDelay
from .fixed_rate import FixedRate
from .misfire import MisfirePolicy, MissedSlots
from .parsing import UnrecognizedScheduleError, parse_schedule
from .persistent import (
    PersistentCronSchedule,
    PlainScheduleAndData,
    ScheduleAndData,
    schedule_from_json,
    schedule_to_json,
)

if TYPE_CHECKING:  # only annotations need them: the package offers no such names
    from datetime import time, timedelta
    from zoneinfo import ZoneInfo

__all__ = [
    "NEVER",
    "CronSchedule",
    "CronSyntaxError",
    "Daily",
    "DisabledSchedule",
    "DisabledScheduleError",
    "FixedDelay",
    "FixedRate",
    "MisfirePolicy",
    "MissedSlots",
    "PersistentCronSchedule",
    "PlainScheduleAndData",
    "Schedule",
    "ScheduleAndData",
    "Schedules",
    "UnrecognizedScheduleError",
    "parse_schedule",
    "schedule_from_json",
    "schedule_to_json",
]


class Schedules:
    """Factories for every schedule kind (db-scheduler's ``Schedules``)."""

    @staticmethod
    def fixed_delay(delay: timedelta) -> FixedDelay:
        """Run ``delay`` after each execution finishes (zero allowed, negative rejected); first run now."""
        return FixedDelay(delay)

    @staticmethod
    def fixed_rate(period: timedelta) -> FixedRate:
        """Run every ``period``, at whole multiples of it from the Unix epoch, however long runs take."""
        return FixedRate(period)

    @staticmethod
    def daily(*times: time | str, zone: str | ZoneInfo = "UTC") -> Daily:
        """Run every day at the given local times (``time`` objects or ``"HH:MM"`` strings) in ``zone``."""
        return Daily(*times, zone=zone)

    @staticmethod
    def cron(expression: str, zone: str | ZoneInfo = "UTC") -> Schedule:
        """Run at the wall-clock times matched by ``expression`` in ``zone``; ``"-"`` is disabled."""
        return CronSchedule(expression, zone)

    @staticmethod
    def parse(text: str) -> Schedule:
        """Read ``FIXED_DELAY|120s`` (or ``FIXED_DELAY|PT2M``), ``FIXED_RATE|30s``, ``DAILY|12:00,13:45|Europe/Rome``, ``-``
        or ``CRON|<pattern>|zone``."""
        return parse_schedule(text)

    @staticmethod
    def disabled() -> Schedule:
        """A schedule that never runs."""
        return DisabledSchedule()
