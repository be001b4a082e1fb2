"""Aligned plain-text tables and the time formats the commands print for people."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime

__all__ = ["TABLE_WIDTH", "format_age", "format_time", "render_table"]


def render_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, indent: str = "", width: int | None = None
) -> str:
    """Columns padded to their widest cell, two spaces apart; ``None`` prints as ``-``.

    The table fits ``width`` characters (default: :data:`TABLE_WIDTH`'s value, 100 unless the
    command runs with ``--wide``; 0 for no limit): the widest columns are narrowed first; a cell
    longer than its column ends with ``…``, except in the last column, whose text wraps onto
    further lines (a word longer than the column is split across them): it is never cut. A
    column is never narrower than its header; times and numbers are never cut.
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
    lines = [list(headers)]
    for row in cells:
        # the last column is the explanation (a check's detail and fix, a description): wrapped
        # onto more lines rather than cut, so that no advice is lost; a word longer than the
        # column (a configuration key, a URL) continues on the next line
        last = _wrap(row[-1], widths[-1])
        lines.append([*row[:-1], last[0]])
        lines += [["" for _ in row[:-1]] + [more] for more in last[1:]]
    return "\n".join(
        indent + "  ".join(_clip(text, widths[i]).ljust(widths[i]) for i, text in enumerate(line)).rstrip()
        for line in lines
    )


#: the width tables fit by default; ``--wide`` sets it to 0 (no limit) for one command
TABLE_WIDTH: ContextVar[int] = ContextVar("TABLE_WIDTH", default=100)
_MIN_COLUMN = 6
_MIN_WRAPPED = 30
_RIGID = (datetime, int, float, bool, type(None))


def _fit(widths: list[int], minimums: list[int], limit: int) -> list[int]:
    """Narrow the widest column, one character at a time, until the row fits or none can shrink."""
    widths = list(widths)
    # the last column first: it wraps, so narrowing it loses nothing
    over = sum(widths) + 2 * (len(widths) - 1) - limit
    if over > 0:
        widths[-1] = max(widths[-1] - over, min(widths[-1], max(minimums[-1], _MIN_WRAPPED)))
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        shrinkable = [i for i, w in enumerate(widths) if w > minimums[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, max(width, 1), break_long_words=True, break_on_hyphens=False) or [""]


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
