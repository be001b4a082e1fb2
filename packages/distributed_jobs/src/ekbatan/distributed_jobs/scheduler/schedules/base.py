"""The :class:`Schedule` contract every schedule implements, and the :data:`NEVER` sentinel."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import UTC, datetime

NEVER: datetime = datetime(2500, 1, 1, 12, 0, 0, tzinfo=UTC)
"""2500-01-01T12:00:00Z: the execution time of a schedule that has no future slot (db-scheduler's value)."""


class Schedule(ABC):
    """When a recurring task runs next.

    The engine asks a schedule for the next execution time **after an execution finishes**, passing
    the instant it finished (``time_done``); the answer is the first slot strictly after that instant.
    Slots missed while nothing was running (scheduler down, long execution) are not replayed.

    All instants passed in and returned are aware UTC ``datetime`` objects; a naive ``datetime`` is
    rejected with ``ValueError`` rather than guessed. Schedules are immutable values: equal
    configuration means equal schedules.
    """

    __slots__ = ()

    @abstractmethod
    def next_execution_time(self, time_done: datetime) -> datetime:
        """The first slot strictly after ``time_done`` (aware UTC in, aware UTC out)."""

    def initial_execution_time(self, now: datetime) -> datetime:
        """When a newly scheduled task first runs; by default the first slot strictly after ``now``."""
        return self.next_execution_time(now)

    @property
    @abstractmethod
    def is_deterministic(self) -> bool:
        """True when the slots are fixed by the calendar (daily, cron) rather than by completion times.

        The engine uses it only at start-up, to decide whether an existing row's execution time should
        be recomputed from a changed schedule.
        """

    @property
    def is_disabled(self) -> bool:
        """True for a schedule that never runs; the engine never schedules such a task."""
        return False
