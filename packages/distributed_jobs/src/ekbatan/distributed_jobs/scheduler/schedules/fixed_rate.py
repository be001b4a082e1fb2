"""Run at a fixed rate: slots a whole number of periods apart, whatever each run takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .._clock import ensure_utc
from .base import Schedule

#: the slots of every fixed rate are counted from here, so they stay put across restarts and
#: every node computes the same ones
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class FixedRate(Schedule):
    """Slots at ``1970-01-01T00:00Z + k × period``: ``next`` is the first slot strictly after
    the instant asked about.

    Unlike :class:`FixedDelay`, the next slot does not move with how long a run took: a run
    due at 10:00:00 with a 30 s rate that takes 4 s is followed by the 10:00:30 slot, not by
    10:00:34. The slots are whole multiples of the period from the Unix epoch (an hourly rate
    runs on the hour, a 30 s rate at :00 and :30), so they are deterministic: every node and
    every restart computes the same ones, and the first run is the first slot after start-up.

    A slot that passes while the previous run is still going (or while no scheduler is up, or
    while the job is paused) is a *missed* slot; the task's misfire policy decides what becomes
    of it (:class:`~ekbatan.distributed_jobs.scheduler.schedules.MisfirePolicy`). There is one
    row per recurring task, so a job never overlaps with itself.
    """

    __slots__ = ("_period",)

    def __init__(self, period: timedelta) -> None:
        if not isinstance(period, timedelta):
            raise TypeError(f"period must be a datetime.timedelta, not {type(period).__name__}")
        if period <= timedelta(0):
            raise ValueError(f"a fixed rate's period must be positive, got {period!r}")
        self._period = period

    @property
    def period(self) -> timedelta:
        return self._period

    def next_execution_time(self, time_done: datetime) -> datetime:
        elapsed = ensure_utc(time_done) - EPOCH
        return EPOCH + (elapsed // self._period + 1) * self._period

    @property
    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixedRate):
            return NotImplemented
        return self._period == other._period

    def __hash__(self) -> int:
        return hash((FixedRate, self._period))

    def __repr__(self) -> str:
        return f"FixedRate({self._period!r})"
