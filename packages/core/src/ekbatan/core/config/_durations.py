"""ISO-8601 durations, exactly as Java's ``Duration.parse`` reads them, and nothing else.

Grammar (case-insensitive): ``[+-]P[nD][T[nH][nM][n[.fraction]S]]`` where each ``n`` may carry
its own sign, the fraction has at most 9 digits and may use ``.`` or ``,``, and at least one
of D/H/M/S is present. Years, months and weeks are not durations here. Shorthands such as
``10s``, ``200ms``, bare numbers and ``HH:MM:SS`` are refused with the ISO form to write.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator

_ISO = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)
_SHORTHAND = re.compile(
    r"^\s*([-+]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|sec|secs|m|min|mins|h|hr|d|day|days)\s*$", re.I
)
_CLOCK = re.compile(r"^\s*(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d+)?))?\s*$")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "h": 3600,
    "hr": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}
_NANOS_PER_SECOND = 1_000_000_000


class DurationFormatError(ValueError):
    """Text that is not an ISO-8601 duration; the message carries the ISO form to write."""


def parse_iso_duration(text: str) -> timedelta:
    """``"PT10S"`` → ``timedelta(seconds=10)``; anything outside the grammar raises."""
    match = _ISO.fullmatch(text)
    if (
        match is None
        or (match[3] is not None and not any(match[i] for i in (4, 5, 6)))
        or not (match[2] or match[3])
    ):
        raise DurationFormatError(f"{text!r} is not an ISO-8601 duration; write {suggest_iso_duration(text)}")
    days, hours, minutes, seconds = (int(match[i]) if match[i] else 0 for i in (2, 4, 5, 6))
    fraction = (match[7] or "").ljust(9, "0")
    nanos = int(fraction) if fraction else 0
    if match[6] and match[6].startswith("-"):
        nanos = -nanos  # the fraction takes the sign of its seconds, as in Java
    total = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * _NANOS_PER_SECOND + nanos
    if match[1] == "-":
        total = -total
    if total % 1000:
        raise DurationFormatError(
            f"{text!r} has a fraction finer than a microsecond, which Python's timedelta cannot hold; "
            f"round it to at most 6 fractional digits"
        )
    try:
        return timedelta(microseconds=total // 1000)
    except OverflowError:
        raise DurationFormatError(f"{text!r} is too long a duration (over 999999999 days)") from None


def format_iso_duration(value: timedelta) -> str:
    """``timedelta(milliseconds=200)`` → ``"PT0.2S"`` (hours, minutes, seconds; as Java prints it)."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    if micros == 0:
        return "PT0S"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    text = "PT"
    if hours:
        text += f"{sign}{hours}H"
    if minutes:
        text += f"{sign}{minutes}M"
    if seconds or fraction:
        frac = f".{fraction:06d}".rstrip("0") if fraction else ""
        text += f"{sign}{seconds}{frac}S"
    return text


def suggest_iso_duration(text: object) -> str:
    """The ISO form a user most likely meant, phrased as advice ("PT10S", "e.g. PT10S for 10 seconds")."""
    if isinstance(text, bool):
        return "an ISO-8601 duration such as PT10S"
    if isinstance(text, int | float):
        return f"PT{_plain_number(text)}S for {_plain_number(text)} seconds (a bare number has no unit)"
    if isinstance(text, str):
        shorthand = _SHORTHAND.match(text)
        if shorthand:
            seconds = float(shorthand[1]) * _UNIT_SECONDS[shorthand[2].lower()]
            return format_iso_duration(timedelta(seconds=seconds))
        clock = _CLOCK.match(text)
        if clock:
            seconds = int(clock[1]) * 3600 + int(clock[2]) * 60 + float(clock[3] or 0)
            return f"{format_iso_duration(timedelta(seconds=seconds))} (HH:MM:SS is not accepted)"
        if re.fullmatch(r"\s*[-+]?\d+(?:\.\d+)?\s*", text):
            return f"PT{text.strip()}S for {text.strip()} seconds (a bare number has no unit)"
    return "an ISO-8601 duration such as PT10S (10 s), PT0.2S (200 ms), PT5M, PT1H or P1D"


def _plain_number(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def _validate(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_iso_duration(value.strip())
    raise DurationFormatError(f"{value!r} is not an ISO-8601 duration; write {suggest_iso_duration(value)}")


IsoDuration = Annotated[
    timedelta,
    PlainValidator(_validate, json_schema_input_type=str),
    PlainSerializer(format_iso_duration, return_type=str),
]
"""A ``timedelta`` field that accepts only ISO-8601 text (or a ``timedelta`` given in code)."""
