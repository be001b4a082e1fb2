"""Cron expressions as wall-clock matchers: parsing, validation and "matching times after X".

Nothing here knows about time zones; :mod:`.cron` turns the naive wall times produced here into
instants. Two syntaxes, chosen by the number of fields:

* **6 fields, Spring 5.3 style** (db-scheduler's default): ``second minute hour day-of-month month
  day-of-week``. ``?`` may stand for ``*`` in the two day fields; day-of-month accepts ``L``,
  ``L-n``, ``LW`` and ``nW``; day-of-week accepts ``dL`` and ``d#n``. A day must satisfy **both**
  day fields (Spring's rule), so ``0 0 0 13 * FRI`` means "every Friday the 13th".
* **5 fields, Unix style**: ``minute hour day-of-month month day-of-week``, seconds are 0. When
  both day fields are restricted (neither starts with ``*``), a day matching **either** is enough
  (the classic cron rule), so ``0 0 13 * FRI`` means "every 13th and every Friday".

Names (``JAN``-``DEC``, ``MON``-``SUN``) are case-insensitive; day-of-week 0 and 7 are Sunday.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, date, datetime
from typing import Any

VALID_EXAMPLES = (
    "valid examples: 6 fields (Spring, seconds first) '0 0 12 * * ?' = every day at 12:00:00, "
    "'0 */15 9-17 * * MON-FRI'; 5 fields (Unix) '0 12 * * *' = every day at 12:00"
)

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1
    )
}
_DAYS = {"MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6, "SUN": 7}

# Four centuries of the Gregorian calendar repeat exactly; a day pattern that matches nowhere in
# 401 years (the extra year covers the partly scanned start) matches nowhere ever.
_SCAN_MONTHS = 12 * 401

_NUMBER = re.compile(r"[0-9]+", re.ASCII)
_DOM_LAST = re.compile(r"L(?:-([0-9]+))?", re.ASCII)
_DOM_NEAREST_WEEKDAY = re.compile(r"([0-9]+)W", re.ASCII)
_DOW_LAST = re.compile(r"([0-9]|[A-Z]{3})L", re.ASCII)
_DOW_NTH = re.compile(r"([0-9]|[A-Z]{3})#([0-9]+)", re.ASCII)


class CronSyntaxError(ValueError):
    """An invalid cron pattern; the message names the pattern, the problem and valid examples."""


@dataclass(frozen=True)
class _Field:
    label: str
    low: int
    high: int
    star_low: int  # where "*" (and "*/n") starts; differs from `low` only for Spring's day-of-week
    names: dict[str, int] | None = None


_SECOND = _Field("second", 0, 59, 0)
_MINUTE = _Field("minute", 0, 59, 0)
_HOUR = _Field("hour", 0, 23, 0)
_DAY_OF_MONTH = _Field("day-of-month", 1, 31, 1)
_MONTH = _Field("month", 1, 12, 1, _MONTHS)
_SPRING_DAY_OF_WEEK = _Field("day-of-week", 0, 7, 1, _DAYS)  # Spring's "*" is MON(1)-SUN(7)
_UNIX_DAY_OF_WEEK = _Field("day-of-week", 0, 7, 0, _DAYS)  # Unix "*/2" counts from SUN(0)

# Day-of-month rules, evaluated per month: ("days", frozenset) | ("last", offset) |
# ("last_weekday",) | ("nearest_weekday", n). Day-of-week: ("weekdays", frozenset of ISO
# weekdays) | ("last_of", iso) | ("nth_of", iso, n).
_Rule = tuple[Any, ...]


class CronExpression:
    """A parsed, validated cron pattern that enumerates matching wall-clock times."""

    __slots__ = (
        "_day_cache",
        "_dom",
        "_dow",
        "_either_day",
        "_hours",
        "_minutes",
        "_months",
        "_seconds",
        "pattern",
        "spring",
    )

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        fields = pattern.upper().split()
        if len(fields) == 6:
            self.spring = True
            second, minute, hour, dom, month, dow = fields
            self._seconds = _parse_list(pattern, second, _SECOND)
        elif len(fields) == 5:
            self.spring = False
            minute, hour, dom, month, dow = fields
            self._seconds = (0,)
        else:
            hint = " (7-field Quartz patterns with a year are not supported)" if len(fields) == 7 else ""
            raise _error(pattern, f"expected 6 or 5 fields, got {len(fields)}{hint}")
        self._minutes = _parse_list(pattern, minute, _MINUTE)
        self._hours = _parse_list(pattern, hour, _HOUR)
        self._months = frozenset(_parse_list(pattern, month, _MONTH))
        self._dom, dom_restricted = self._parse_day_of_month(dom)
        self._dow, dow_restricted = self._parse_day_of_week(dow)
        self._either_day = not self.spring and dom_restricted and dow_restricted
        self._day_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    # ---------------------------------------------------------------- parsing the day fields

    def _parse_day_of_month(self, text: str) -> tuple[_Rule, bool]:
        if text == "?":
            self._require_spring(text, "'?'")
            return ("days", frozenset(range(1, 32))), False
        if self.spring:
            if match := _DOM_LAST.fullmatch(text):
                offset = int(match.group(1) or 0)
                if offset > 30:
                    raise _error(self.pattern, f"'{text}': the offset after L- must be 0-30")
                return ("last", offset), True
            if text == "LW":
                return ("last_weekday",), True
            if match := _DOM_NEAREST_WEEKDAY.fullmatch(text):
                day = int(match.group(1))
                if not 1 <= day <= 31:
                    raise _error(self.pattern, f"'{text}': the day before W must be 1-31")
                return ("nearest_weekday", day), True
        elif any(c in text for c in "LW#?"):
            self._require_spring(text, "'L', 'W', '#' and '?'")
        days = _parse_list(self.pattern, text, _DAY_OF_MONTH, specials_hint=self.spring)
        return ("days", frozenset(days)), not text.startswith("*")

    def _parse_day_of_week(self, text: str) -> tuple[_Rule, bool]:
        if text == "?":
            self._require_spring(text, "'?'")
            return ("weekdays", frozenset(range(1, 8))), False
        if self.spring:
            if match := _DOW_LAST.fullmatch(text):
                return ("last_of", self._weekday(match.group(1), text)), True
            if match := _DOW_NTH.fullmatch(text):
                nth = int(match.group(2))
                if not 1 <= nth <= 5:
                    raise _error(self.pattern, f"'{text}': the number after # must be 1-5")
                return ("nth_of", self._weekday(match.group(1), text), nth), True
            if text == "L":
                raise _error(self.pattern, "'L' in day-of-week needs a day before it, e.g. '5L' or 'FRIL'")
        elif "#" in text or "?" in text or text.endswith("L"):
            self._require_spring(text, "'L', 'W', '#' and '?'")
        values = _parse_list(self.pattern, text, self._day_of_week_field, specials_hint=self.spring)
        return ("weekdays", frozenset(7 if v == 0 else v for v in values)), not text.startswith("*")

    @property
    def _day_of_week_field(self) -> _Field:
        return _SPRING_DAY_OF_WEEK if self.spring else _UNIX_DAY_OF_WEEK

    def _weekday(self, token: str, text: str) -> int:
        try:
            value = _parse_value(token, self._day_of_week_field, context=text)
        except ValueError as e:
            raise _error(self.pattern, f"day-of-week field: {e}") from None
        return 7 if value == 0 else value

    def _require_spring(self, text: str, what: str) -> None:
        if not self.spring:
            raise _error(
                self.pattern,
                f"'{text}': {what} are only supported in 6-field (Spring) patterns, not in 5-field (Unix)",
            )

    # ---------------------------------------------------------------- matching

    def _days_of_month(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of a month whose month field already matched, ascending."""
        first_weekday, length = calendar.monthrange(year, month)
        key = (first_weekday, length)
        days = self._day_cache.get(key)
        if days is None:
            days = self._compute_days(first_weekday + 1, length)
            self._day_cache[key] = days
        return days

    def _compute_days(self, first_iso: int, length: int) -> tuple[int, ...]:
        def weekday(day: int) -> int:  # ISO weekday (Mon=1 .. Sun=7) of a day of this month
            return (first_iso - 1 + day - 1) % 7 + 1

        by_month_day = _days_by_month_day(self._dom, length, weekday)
        by_week_day = _days_by_week_day(self._dow, length, weekday, first_iso)
        days = by_month_day | by_week_day if self._either_day else by_month_day & by_week_day
        return tuple(sorted(days))

    def _times_after(self, after: tuple[int, int, int] | None) -> Iterator[tuple[int, int, int]]:
        """Matching (hour, minute, second) of a day, ascending, strictly after ``after`` if given."""
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        if after is None:
            for h in hours:
                for m in minutes:
                    for s in seconds:
                        yield h, m, s
            return
        after_h, after_m, after_s = after
        for h in hours:
            if h < after_h:
                continue
            for m in minutes:
                if h == after_h and m < after_m:
                    continue
                for s in seconds:
                    if h == after_h and m == after_m and s <= after_s:
                        continue
                    yield h, m, s

    def walls_after(self, start: datetime) -> Iterator[datetime]:
        """Matching naive wall-clock times strictly after ``start``, ascending.

        Ends when four centuries have been scanned (then nothing will ever match) or at year 9999.
        """
        start_day = start.date()
        start_time = (start.hour, start.minute, start.second)  # whole seconds: any later match is later
        year, month = start.year, start.month
        for _ in range(_SCAN_MONTHS):
            if month in self._months:
                for day in self._days_of_month(year, month):
                    current = date(year, month, day)
                    if current < start_day:
                        continue
                    after = start_time if current == start_day else None
                    for h, m, s in self._times_after(after):
                        yield datetime(year, month, day, h, m, s)
            month += 1
            if month == 13:
                month, year = 1, year + 1
                if year > MAXYEAR:
                    return


def _days_by_month_day(rule: _Rule, length: int, weekday: Callable[[int], int]) -> set[int]:
    kind = rule[0]
    if kind == "days":
        return {d for d in rule[1] if d <= length}
    if kind == "last":
        day = length - rule[1]
        return {day} if day >= 1 else set()
    if kind == "last_weekday":
        return {length - max(0, weekday(length) - 5)}  # Sat -> Fri (-1), Sun -> Fri (-2)
    # nearest weekday to day n, never leaving the month (Quartz's rule)
    n = rule[1]
    if n > length:
        return set()
    wd = weekday(n)
    if wd <= 5:
        return {n}
    if wd == 6:  # Saturday: the Friday before, or Monday the 3rd when n is the 1st
        return {n - 1} if n > 1 else {n + 2}
    return {n + 1} if n < length else {n - 2}  # Sunday: the Monday after, or the Friday before


def _days_by_week_day(rule: _Rule, length: int, weekday: Callable[[int], int], first_iso: int) -> set[int]:
    kind = rule[0]
    if kind == "weekdays":
        return {d for d in range(1, length + 1) if weekday(d) in rule[1]}
    if kind == "last_of":
        return {length - (weekday(length) - rule[1]) % 7}
    first = 1 + (rule[1] - first_iso) % 7
    day = first + 7 * (rule[2] - 1)
    return {day} if day <= length else set()


def _parse_list(pattern: str, text: str, field: _Field, *, specials_hint: bool = False) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        try:
            values.update(_parse_item(item, field))
        except ValueError as e:
            hint = ""
            if specials_hint and field in (_DAY_OF_MONTH, _SPRING_DAY_OF_WEEK):
                hint = (
                    "; the specials L, W and # must make up the whole field "
                    "(day-of-month: L, L-3, LW, 15W; day-of-week: 5L, FRIL, MON#1)"
                )
            raise _error(pattern, f"{field.label} field '{text}': {e}{hint}") from None
    return tuple(sorted(values))


def _parse_item(item: str, field: _Field) -> range:
    if not item:
        raise ValueError("empty list element")
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
            raise ValueError(f"'{item}': the step after '/' must be a positive number")
        step = int(step_text)
    if base == "*":
        return range(field.star_low, field.high + 1, step)
    low_text, dash, high_text = base.partition("-")
    low = _parse_value(low_text, field, context=item)
    if dash:
        high = _parse_value(high_text, field, context=item)
        if field.names is _DAYS and low == 7 and high != 7:
            low = 0  # Sunday starting a range means 0: SUN-SAT is the whole week (as in Spring)
        if low > high:
            raise ValueError(f"'{item}': range goes backwards")
    else:
        high = field.high if slash else low  # "n/step" runs from n to the end of the field
    return range(low, high + 1, step)


def _parse_value(token: str, field: _Field, *, context: str) -> int:
    if field.names is not None and token in field.names:
        return field.names[token]
    if not _NUMBER.fullmatch(token):
        known = " or a known name" if field.names else ""
        raise ValueError(f"'{context}': '{token}' is not a number{known}")
    value = int(token)
    if not field.low <= value <= field.high:
        raise ValueError(f"'{context}': {value} is outside {field.low}-{field.high}")
    return value


def _error(pattern: str, problem: str) -> CronSyntaxError:
    return CronSyntaxError(f"invalid cron pattern {pattern!r}: {problem}; {VALID_EXAMPLES}")
