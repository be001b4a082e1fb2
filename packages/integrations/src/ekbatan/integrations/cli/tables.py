"""Aligned plain-text tables and the time formats the commands print for people."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime

__all__ = ["TABLE_WIDTH", "format_age", "format_time", "render_table"]


def render_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, indent: str = "", width: int | None = None
) -> str:
    """Columns padded to their widest cell, two spaces apart; ``None`` prints as ``-``.

    The table fits ``width`` characters (default: :data:`TABLE_WIDTH`'s value, 100 unless the
    command runs with ``--wide``; None for no limit): the widest columns are narrowed first, and
    a cell longer than its column ends with ``…``. A column is never narrower than its header.
    """
    limit = TABLE_WIDTH.get() if width is None else width
    values = [list(row) for row in rows]
    cells = [[_cell(value) for value in row] for row in values]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    if limit:
        # times and numbers are never cut: a clipped timestamp or count misleads
        rigid = [all(isinstance(row[i], _RIGID) for row in values) for i in range(len(headers))]
        minimums = [widths[i] if rigid[i] else max(len(h), _MIN_COLUMN) for i, h in enumerate(headers)]
        widths = _fit(widths, minimums, limit - len(indent))
    lines = [list(headers), *cells]
    return "\n".join(
        indent + "  ".join(_clip(text, widths[i]).ljust(widths[i]) for i, text in enumerate(line)).rstrip()
        for line in lines
    )


#: the width tables fit by default; ``--wide`` sets it to 0 (no limit) for one command
TABLE_WIDTH: ContextVar[int] = ContextVar("TABLE_WIDTH", default=100)
_MIN_COLUMN = 6
_RIGID = (datetime, int, float, bool, type(None))


def _fit(widths: list[int], minimums: list[int], limit: int) -> list[int]:
    """Narrow the widest column, one character at a time, until the row fits or none can shrink."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        shrinkable = [i for i, w in enumerate(widths) if w > minimums[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


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
