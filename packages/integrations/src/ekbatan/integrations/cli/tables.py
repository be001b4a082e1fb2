"""Aligned plain-text tables and the time formats the commands print for people."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

__all__ = ["format_age", "format_time", "render_table"]


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, indent: str = "") -> str:
    """Columns padded to their widest cell, two spaces apart; ``None`` prints as ``-``."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = [headers, *cells]
    return "\n".join(
        indent + "  ".join(text.ljust(widths[i]) for i, text in enumerate(line)).rstrip() for line in lines
    )


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return format_time(value)
    return str(value)


def format_time(value: datetime | None) -> str:
    """``2030-01-01T09:00:00Z``: UTC to the second."""
    if value is None:
        return "-"
    return value.astimezone(UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def format_age(seconds: float | None) -> str:
    """``45s``, ``3m 05s``, ``2h 10m``, ``4d 03h``: the two largest units."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
