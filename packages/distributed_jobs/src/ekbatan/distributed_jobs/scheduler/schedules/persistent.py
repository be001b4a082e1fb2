"""Schedules that live in a task's data, and the JSON form used to store them.

A *persistent-schedule* recurring task keeps its schedule in ``task_data`` next to the user's own
data, so every instance can run on its own schedule and the schedule can be changed per instance.
The data object implements :class:`ScheduleAndData`; two ready-made implementations are provided:
:class:`PlainScheduleAndData` (any schedule) and :class:`PersistentCronSchedule` (a cron pattern and
zone, stored as strings and turned into a :class:`CronSchedule` when needed).

The JSON shapes follow db-scheduler's Gson/Jackson output in spirit: a ``"type"`` discriminator
(``cron``, ``fixedDelay``, ``daily``, ``disabled``), the fixed delay as integer milliseconds, zones
as IANA ids. Unknown extra keys are ignored when reading, as Jackson is configured to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import time, timedelta
from typing import Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo

from ._zones import resolve_zone, zone_key
from .base import Schedule
from .cron import CronSchedule
from .daily import Daily
from .disabled import DisabledSchedule
from .fixed_delay import FixedDelay
from .fixed_rate import FixedRate

_TYPES = ("cron", "fixedDelay", "fixedRate", "daily", "disabled")
_ISO_TIME = re.compile(r"([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?", re.ASCII)
# Gson's default LocalTime adapter writes a locale-dependent short time, e.g. "12:30 PM" on en-US
# (recent JDKs put a narrow no-break space before AM/PM); read that form too.
_CLOCK_TIME = re.compile(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?[ \u00a0\u202f]?([AP]M)", re.ASCII | re.I)


@runtime_checkable
class ScheduleAndData(Protocol):
    """Task data that carries its own schedule: the engine reads ``schedule`` after each execution."""

    @property
    def schedule(self) -> Schedule: ...

    @property
    def data(self) -> Any: ...


class PlainScheduleAndData:
    """Any :class:`Schedule` together with optional user data (a JSON value when stored as JSON)."""

    __slots__ = ("_data", "_schedule")

    def __init__(self, schedule: Schedule, data: Any = None) -> None:
        if not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a Schedule, not {type(schedule).__name__}")
        self._schedule = schedule
        self._data = data

    @property
    def schedule(self) -> Schedule:
        return self._schedule

    @property
    def data(self) -> Any:
        return self._data

    def to_json(self) -> dict[str, Any]:
        """``{"schedule": {...}, "data": <data>}``."""
        return {"schedule": schedule_to_json(self._schedule), "data": self._data}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PlainScheduleAndData:
        _require_mapping(value, "PlainScheduleAndData")
        if "schedule" not in value:
            raise ValueError(f"PlainScheduleAndData JSON needs a 'schedule' key, got keys {sorted(value)}")
        return cls(schedule_from_json(value["schedule"]), value.get("data"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlainScheduleAndData):
            return NotImplemented
        return self._schedule == other._schedule and self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # data is usually a dict or list

    def __repr__(self) -> str:
        return f"PlainScheduleAndData({self._schedule!r}, data={self._data!r})"


class PersistentCronSchedule:
    """A cron pattern and zone id (kept as strings) plus optional user data.

    ``schedule`` is the matching :class:`CronSchedule`; the pattern is validated here, at
    construction, so a bad pattern fails when it is stored rather than when the task first completes.
    """

    __slots__ = ("_data", "_schedule")

    def __init__(self, pattern: str, zone: str | ZoneInfo = "UTC", data: Any = None) -> None:
        self._schedule = CronSchedule(pattern, zone)
        self._data = data

    @property
    def pattern(self) -> str:
        return self._schedule.pattern

    @property
    def zone_id(self) -> str:
        return zone_key(self._schedule.zone)

    @property
    def schedule(self) -> CronSchedule:
        return self._schedule

    @property
    def data(self) -> Any:
        return self._data

    def to_json(self) -> dict[str, Any]:
        """``{"pattern": ..., "zoneId": ..., "data": <data>}``."""
        return {"pattern": self.pattern, "zoneId": self.zone_id, "data": self._data}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PersistentCronSchedule:
        """Read :meth:`to_json`'s shape; a missing or null ``zoneId`` means UTC."""
        _require_mapping(value, "PersistentCronSchedule")
        pattern = _required(value, "pattern", str, "PersistentCronSchedule")
        return cls(pattern, _zone_id(value, "zoneId"), value.get("data"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PersistentCronSchedule):
            return NotImplemented
        return self._schedule == other._schedule and self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # unhashable, as equal values compare their data

    def __repr__(self) -> str:
        return f"PersistentCronSchedule({self.pattern!r}, zone={self.zone_id!r}, data={self._data!r})"


def schedule_to_json(schedule: Schedule) -> dict[str, Any]:
    """The JSON object (a ``dict``) for a schedule; see :func:`schedule_from_json` for the shapes."""
    if isinstance(schedule, CronSchedule):
        return {"type": "cron", "pattern": schedule.pattern, "zoneId": zone_key(schedule.zone)}
    if isinstance(schedule, FixedDelay | FixedRate):
        amount = schedule.delay if isinstance(schedule, FixedDelay) else schedule.period
        millis, remainder = divmod(amount, timedelta(milliseconds=1))
        if remainder:
            raise ValueError(
                f"{schedule!r} cannot be stored exactly: JSON keeps the duration in whole milliseconds"
            )
        return {"type": "fixedDelay" if isinstance(schedule, FixedDelay) else "fixedRate", "duration": millis}
    if isinstance(schedule, Daily):
        return {
            "type": "daily",
            "times": [t.isoformat() for t in schedule.times],
            "zone": zone_key(schedule.zone),
        }
    if isinstance(schedule, DisabledSchedule):
        return {"type": "disabled"}
    raise TypeError(
        f"cannot encode {type(schedule).__name__} as JSON; known schedule types: {', '.join(_TYPES)}"
    )


def schedule_from_json(value: Mapping[str, Any]) -> Schedule:
    """Rebuild a schedule from its JSON object.

    * ``{"type": "cron", "pattern": "0 0 12 * * ?", "zoneId": "Europe/Rome"}`` (missing zoneId: UTC)
    * ``{"type": "fixedDelay", "duration": 10000}`` (integer milliseconds)
    * ``{"type": "fixedRate", "duration": 30000}`` (integer milliseconds; an extension)
    * ``{"type": "daily", "times": ["12:30:00"], "zone": "Europe/Rome"}`` (missing zone: UTC; times
      also as ``"12:30"`` or Gson's en-US ``"12:30 PM"``)
    * ``{"type": "disabled"}``

    An unknown ``type`` or a malformed field raises ``ValueError`` naming it.
    """
    _require_mapping(value, "schedule")
    kind = value.get("type")
    if kind == "cron":
        return CronSchedule(_required(value, "pattern", str, "cron schedule"), _zone_id(value, "zoneId"))
    if kind in ("fixedDelay", "fixedRate"):
        duration = _required(value, "duration", int, f"{kind} schedule")
        if isinstance(duration, bool):
            raise ValueError(f"{kind}: 'duration' must be integer milliseconds, not {duration!r}")
        amount = timedelta(milliseconds=duration)
        return FixedDelay(amount) if kind == "fixedDelay" else FixedRate(amount)
    if kind == "daily":
        times = _required(value, "times", list, "daily schedule")
        return Daily(*(_json_time(t) for t in times), zone=_zone_id(value, "zone"))
    if kind == "disabled":
        return DisabledSchedule()
    expected = ", ".join(_TYPES)
    raise ValueError(f"unknown schedule type {kind!r} in {dict(value)!r}; expected one of {expected}")


def _json_time(value: object) -> time:
    if isinstance(value, str):
        if match := _ISO_TIME.fullmatch(value):
            hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
            micros = int((match[4] or "0").ljust(6, "0"))
            if hour <= 23 and minute <= 59 and second <= 59:
                return time(hour, minute, second, micros)
        elif match := _CLOCK_TIME.fullmatch(value):
            hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
            if 1 <= hour <= 12 and minute <= 59 and second <= 59:
                hour = hour % 12 + (12 if match[4].upper() == "PM" else 0)
                return time(hour, minute, second)
    raise ValueError(f"daily schedule: invalid time {value!r}; expected 'HH:MM:SS', e.g. '12:30:00'")


def _zone_id(value: Mapping[str, Any], key: str) -> ZoneInfo:
    zone = value.get(key)
    if zone is None:
        return resolve_zone("UTC")
    if not isinstance(zone, str):
        raise ValueError(f"{key!r} must be a time-zone id string, got {zone!r}")
    return resolve_zone(zone)


def _required(value: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    if key not in value:
        raise ValueError(f"{what} JSON needs a {key!r} key, got {dict(value)!r}")
    field = value[key]
    if not isinstance(field, kind):
        raise ValueError(f"{what}: {key!r} must be a {kind.__name__}, got {field!r}")
    return field


def _require_mapping(value: object, what: str) -> None:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} JSON must be an object (dict), got {type(value).__name__}: {value!r}")
