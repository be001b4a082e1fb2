"""Times the operator types in the pages' forms: UTC, as a browser's ``datetime-local`` input
sends them (``YYYY-MM-DDTHH:MM``, with ``:SS`` when seconds are given)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["TIME_FORMAT", "parse_typed_time"]

TIME_FORMAT = "YYYY-MM-DDTHH:MM or YYYY-MM-DDTHH:MM:SS"
_TIME_PATTERNS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")


def parse_typed_time(text: str) -> datetime:
    """The UTC time ``text`` says; a ValueError naming the value and the format otherwise."""
    value = text.strip()
    for pattern in _TIME_PATTERNS:
        try:
            return datetime.strptime(value, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    shown = value if len(value) <= 40 else value[:40] + "…"
    raise ValueError(f"{shown!r} is not a time: write it in UTC as {TIME_FORMAT}, e.g. 2030-01-31T09:00.")
