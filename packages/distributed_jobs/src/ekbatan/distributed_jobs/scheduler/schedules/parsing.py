"""Schedules written as short strings, e.g. in configuration: ``FIXED_DELAY|120s``, ``DAILY|12:00``, ``-``.

The accepted forms are db-scheduler's (``Schedules.parseSchedule``), plus one documented extension,
``CRON|<pattern>[|<zone>]``, which db-scheduler's parser does not have.
"""

from __future__ import annotations

import re

from .base import Schedule
from .cron import CronSchedule
from .daily import Daily, parse_time_of_day
from .disabled import DisabledSchedule
from .fixed_delay import FixedDelay

EXAMPLES = "[FIXED_DELAY|120s, DAILY|12:00, DAILY|12:00,13:45, DAILY|12:00,13:45|Europe/Rome, -]"

_FIXED_DELAY = re.compile(r"FIXED_DELAY\|([0-9]+)s", re.ASCII)
_DAILY = re.compile(r"DAILY\|([0-9]{2}:[0-9]{2}(?:,[0-9]{2}:[0-9]{2})*)(?:\|(.+))?", re.ASCII | re.DOTALL)
_CRON = re.compile(r"CRON\|([^|]+)(?:\|(.+))?", re.ASCII | re.DOTALL)
_DISABLED = "-"


class UnrecognizedScheduleError(ValueError):
    """The text matches none of the schedule forms; the message lists parsable examples."""

    def __init__(self, text: object) -> None:
        super().__init__(f"Unrecognized schedule: '{text}'. Parsable examples: {EXAMPLES}")
        self.text = text


def parse_schedule(text: str) -> Schedule:
    """Turn a schedule string into a :class:`Schedule`.

    ==================================  =====================================================
    ``FIXED_DELAY|<N>s``                ``FixedDelay.of_seconds(N)``; ``0s`` is rejected
    ``DAILY|HH:MM[,HH:MM...][|Zone]``   ``Daily(times..., zone=Zone or "UTC")``
    ``-``                               ``DisabledSchedule()``
    ``CRON|<pattern>[|Zone]``           ``CronSchedule(pattern, Zone or "UTC")`` (extension)
    ==================================  =====================================================

    Anything else (including ``None`` and ``""``) raises :class:`UnrecognizedScheduleError`, a
    ``ValueError``. A string of the right shape with a bad value (``DAILY|25:00``,
    ``DAILY|12:00|WRONG``, ``FIXED_DELAY|0s``, a bad cron pattern) raises ``ValueError`` naming it.
    """
    if not isinstance(text, str) or not text:
        raise UnrecognizedScheduleError(text)
    if match := _FIXED_DELAY.fullmatch(text):
        try:
            return FixedDelay.of_seconds(int(match.group(1)))
        except ValueError as e:
            raise ValueError(f"invalid schedule {text!r}: {e}") from None
    if match := _DAILY.fullmatch(text):
        times, zone = match.group(1).split(","), match.group(2)
        try:
            return Daily(*(parse_time_of_day(t) for t in times), zone="UTC" if zone is None else zone)
        except ValueError as e:
            raise ValueError(f"invalid schedule {text!r}: {e}") from None
    if text == _DISABLED:
        return DisabledSchedule()
    if match := _CRON.fullmatch(text):
        pattern, zone = match.group(1), match.group(2)
        try:
            return CronSchedule(pattern, "UTC" if zone is None else zone)
        except ValueError as e:
            raise ValueError(f"invalid schedule {text!r}: {e}") from None
    raise UnrecognizedScheduleError(text)
