"""Schedules written as short strings, e.g. in configuration: ``FIXED_DELAY|120s``, ``DAILY|12:00``, ``-``.

The accepted forms are db-scheduler's (``Schedules.parseSchedule``), plus two documented extensions
its parser does not have: ``CRON|<pattern>[|<zone>]``, and an ISO-8601 duration as the delay of
``FIXED_DELAY`` (``FIXED_DELAY|PT10S``), the form ``application.yml`` writes every duration in.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .base import Schedule
from .cron import CronSchedule
from .daily import Daily, parse_time_of_day
from .disabled import DisabledSchedule
from .fixed_delay import FixedDelay
from .fixed_rate import FixedRate

EXAMPLES = (
    "[FIXED_DELAY|120s, FIXED_DELAY|PT2M, FIXED_RATE|30s, FIXED_RATE|PT1H, DAILY|12:00, DAILY|12:00,13:45, "
    "DAILY|12:00,13:45|Europe/Rome, CRON|0 */5 * * * *, -]"
)
DELAY_FORMS = "whole seconds as <N>s (e.g. 10s) or an ISO-8601 duration (e.g. PT10S, PT0.5S, PT5M, PT1H)"

_FIXED_DELAY = re.compile(r"FIXED_DELAY\|(.*)", re.DOTALL)
_FIXED_RATE = re.compile(r"FIXED_RATE\|(.*)", re.DOTALL)
_SECONDS = re.compile(r"([0-9]+)s", re.ASCII)
# Java's Duration.parse grammar, which configuration also reads: [+-]P[nD][T[nH][nM][n[.f]S]],
# case-insensitive, each number with its own optional sign, at most 9 fractional digits.
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE | re.ASCII,
)
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
    ``FIXED_DELAY|<ISO-8601>``          ``FixedDelay(duration)``, e.g. ``PT10S``; must be positive
    ``FIXED_RATE|<N>s`` or ``<ISO>``   ``FixedRate(period)`` (extension), e.g. ``FIXED_RATE|PT1H``
    ``DAILY|HH:MM[,HH:MM...][|Zone]``   ``Daily(times..., zone=Zone or "UTC")``
    ``-``                               ``DisabledSchedule()``
    ``CRON|<pattern>[|Zone]``           ``CronSchedule(pattern, Zone or "UTC")`` (extension)
    ==================================  =====================================================

    Anything else (including ``None`` and ``""``) raises :class:`UnrecognizedScheduleError`, a
    ``ValueError``. A string of the right shape with a bad value (``DAILY|25:00``,
    ``DAILY|12:00|WRONG``, ``FIXED_DELAY|0s``, ``FIXED_DELAY|10m``, a bad cron pattern) raises
    ``ValueError`` naming it; a bad delay's message also names both accepted delay forms.
    """
    if not isinstance(text, str) or not text:
        raise UnrecognizedScheduleError(text)
    if match := _FIXED_DELAY.fullmatch(text):
        try:
            return _fixed_delay(match.group(1))
        except ValueError as e:
            raise ValueError(f"invalid schedule {text!r}: {e}") from None
    if match := _FIXED_RATE.fullmatch(text):
        try:
            return FixedRate(_positive_duration(match.group(1), "period"))
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


def _fixed_delay(value: str) -> FixedDelay:
    if seconds := _SECONDS.fullmatch(value):
        return FixedDelay.of_seconds(int(seconds.group(1)))
    return FixedDelay(_positive_duration(value, "delay"))


def _positive_duration(value: str, what: str) -> timedelta:
    """``120s`` or an ISO-8601 duration, positive (the amount of a fixed delay or rate)."""
    if seconds := _SECONDS.fullmatch(value):
        amount = timedelta(seconds=int(seconds.group(1)))
    elif (parsed := iso_duration(value)) is not None:
        amount = parsed
    else:
        raise ValueError(f"the {what} {value!r} is neither of its two forms; write {DELAY_FORMS}")
    if amount <= timedelta(0):
        raise ValueError(f"a fixed {what} must be positive, got {value!r}; write {DELAY_FORMS}")
    return amount


def iso_duration(text: str) -> timedelta | None:
    """``"PT10S"`` → ``timedelta(seconds=10)``; None when ``text`` is outside the grammar.

    The engine depends on SQLAlchemy only, so it reads the durations itself rather than through
    ``ekbatan.core``'s settings parser; both follow Java's ``Duration.parse``.
    """
    match = _ISO_DURATION.fullmatch(text)
    if match is None or not (match[2] or match[3]) or (match[3] and not any(match[i] for i in (4, 5, 6))):
        return None
    days, hours, minutes, seconds = (int(match[i]) if match[i] else 0 for i in (2, 4, 5, 6))
    nanos = int((match[7] or "").ljust(9, "0"))
    if match[6] and match[6].startswith("-"):
        nanos = -nanos  # the fraction takes the sign of its seconds, as in Java
    total = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1_000_000_000 + nanos
    if match[1] == "-":
        total = -total
    if total % 1000:
        raise ValueError(
            f"the delay {text!r} has a fraction finer than a microsecond, which a timedelta cannot hold; "
            "round it to at most 6 fractional digits"
        )
    try:
        return timedelta(microseconds=total // 1000)
    except OverflowError:
        raise ValueError(f"the delay {text!r} is too long (over 999999999 days)") from None
