"""A schedule that never runs."""

from __future__ import annotations

from datetime import datetime

from .base import Schedule


class DisabledScheduleError(RuntimeError):
    """Raised when a time is asked of a disabled schedule; check ``is_disabled`` first."""


class DisabledSchedule(Schedule):
    """Never runs: ``is_disabled`` is True and every other question raises :class:`DisabledScheduleError`.

    For a static recurring task the engine then inserts nothing and cancels an existing row at start-up.
    The string form is ``"-"`` (see :func:`parse_schedule`); ``Schedules.cron("-")`` is the cron
    flavour of the same thing.
    """

    __slots__ = ()

    def next_execution_time(self, time_done: datetime) -> datetime:
        raise DisabledScheduleError("a disabled schedule has no execution times; check is_disabled first")

    def initial_execution_time(self, now: datetime) -> datetime:
        raise DisabledScheduleError("a disabled schedule has no execution times; check is_disabled first")

    @property
    def is_deterministic(self) -> bool:
        raise DisabledScheduleError("is_deterministic is meaningless for a disabled schedule")

    @property
    def is_disabled(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DisabledSchedule):
            return NotImplemented
        return True

    def __hash__(self) -> int:
        return hash(DisabledSchedule)

    def __repr__(self) -> str:
        return "DisabledSchedule()"
