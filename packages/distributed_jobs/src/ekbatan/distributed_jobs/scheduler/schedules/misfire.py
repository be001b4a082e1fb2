"""Misfire policies: what becomes of a recurring task's slots that passed without a run.

A slot is *missed* when it passes while no scheduler ran the task: the cluster was down, the
job was paused, or its previous run was still going (one row per recurring task, so a job never
overlaps with itself). Three policies:

* ``run_once`` (the default, and db-scheduler's behaviour): an overdue row runs once, however
  many slots it missed; the next slot is the first after that run ends.
* ``skip`` with a grace period: a run that would start more than ``grace`` after its slot does
  not run; the row moves to the first slot after now.
* ``run_all`` with a limit: each missed slot runs in turn, oldest first, until the schedule has
  caught up; a backlog of more than ``limit`` slots is skipped whole instead.

Slots not run are counted and reported (the execution history records them as ``missed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from .base import Schedule
from .parsing import iso_duration

#: slots counted at most when reporting how many were missed (counting walks the schedule)
COUNT_CAP = 1_000
#: the grace of ``skip`` when none is given: above the default polling interval (10 s), so
#: the ordinary lateness of a poll never counts as a miss
DEFAULT_GRACE = timedelta(minutes=1)
#: the most missed slots ``run_all`` catches up when none is given
DEFAULT_LIMIT = 100
FORMS = "run_once, skip, skip|<ISO-8601 grace, e.g. PT30S>, run_all or run_all|<limit, e.g. 10>"

_FORM = re.compile(r"(run_once|skip|run_all)(?:\|(.+))?", re.ASCII | re.DOTALL)


@dataclass(frozen=True, slots=True)
class MissedSlots:
    """Slots of one recurring execution that passed without a run."""

    #: how many (at least 1)
    count: int
    #: there were more than ``count`` (counting stops at :data:`COUNT_CAP`)
    more: bool
    #: the first and the last of them
    first: datetime
    last: datetime
    #: where the row goes next
    next_time: datetime

    def describe(self) -> str:
        many = f"{self.count}{'+' if self.more else ''}"
        if self.count == 1 and not self.more:
            return f"1 slot missed ({self.first.isoformat()})"
        return f"{many} slots missed ({self.first.isoformat()} … {self.last.isoformat()})"


class MisfirePolicy:
    """What a recurring task does with slots that passed without a run (module docstring)."""

    __slots__ = ("_grace", "_kind", "_limit")

    def __init__(self, kind: str, *, grace: timedelta = DEFAULT_GRACE, limit: int = DEFAULT_LIMIT) -> None:
        if kind not in ("run_once", "skip", "run_all"):
            raise ValueError(f"unknown misfire policy {kind!r}; write one of {FORMS}")
        if not isinstance(grace, timedelta) or grace < timedelta(0):
            raise ValueError(f"a misfire grace must be a timedelta of zero or more, got {grace!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"a misfire catch-up limit must be a whole number of at least 1, got {limit!r}")
        self._kind = kind
        self._grace = grace
        self._limit = limit

    @staticmethod
    def run_once() -> MisfirePolicy:
        """An overdue row runs once; the slots it missed are not run (the default)."""
        return MisfirePolicy("run_once")

    @staticmethod
    def skip(grace: timedelta = DEFAULT_GRACE) -> MisfirePolicy:
        """A run more than ``grace`` late does not run; the row moves to the first slot after
        now. Keep ``grace`` above the polling interval, or ordinary polling lateness skips runs."""
        return MisfirePolicy("skip", grace=grace)

    @staticmethod
    def run_all(limit: int = DEFAULT_LIMIT) -> MisfirePolicy:
        """Every missed slot runs, oldest first; a backlog of more than ``limit`` is skipped."""
        return MisfirePolicy("run_all", limit=limit)

    @staticmethod
    def parse(text: str) -> MisfirePolicy:
        """``run_once``, ``skip``, ``skip|PT30S``, ``run_all`` or ``run_all|10``."""
        match = _FORM.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"unrecognized misfire policy {text!r}; write one of {FORMS}")
        kind, argument = match.group(1), match.group(2)
        if argument is None:
            return MisfirePolicy(kind)
        if kind == "skip":
            grace = iso_duration(argument)
            if grace is None or grace < timedelta(0):
                raise ValueError(
                    f"misfire policy {text!r}: the grace {argument!r} is not an ISO-8601 duration of "
                    "zero or more; write e.g. skip|PT30S or skip|PT5M"
                )
            return MisfirePolicy(kind, grace=grace)
        if kind == "run_all" and argument.isdigit() and int(argument) >= 1:
            return MisfirePolicy(kind, limit=int(argument))
        raise ValueError(f"misfire policy {text!r}: bad argument {argument!r}; write one of {FORMS}")

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def grace(self) -> timedelta:
        return self._grace

    @property
    def limit(self) -> int:
        return self._limit

    # ------------------------------------------------------------------ applying it
    def missed_at_start(self, schedule: Schedule, scheduled: datetime, now: datetime) -> MissedSlots | None:
        """Before a run starts: the slots to skip instead of running (``skip`` only), or None
        to run it."""
        if self._kind != "skip" or now - scheduled <= self._grace:
            return None
        # a fixed delay's slots follow its runs: only the late one itself is missed
        count, more, last = (
            _slots_between(schedule, scheduled, now) if schedule.is_deterministic else (0, False, None)
        )
        return MissedSlots(1 + count, more, scheduled, last or scheduled, schedule.next_execution_time(now))

    def after_run(
        self, schedule: Schedule, scheduled: datetime, done: datetime
    ) -> tuple[datetime, MissedSlots | None]:
        """After a run of the slot ``scheduled`` ended at ``done``: the next execution time, and
        the slots that will not run (None: none)."""
        if self._kind == "run_all" and schedule.is_deterministic:
            following = schedule.next_execution_time(scheduled)
            if following > done:
                return following, None
            # the backlog: ``following`` and every slot after it up to now
            count, more, last = _slots_between(schedule, following, done, cap=self._limit)
            if 1 + count <= self._limit:
                return following, None  # due already: the next poll runs it
            count, more, last = _slots_between(schedule, following, done)
            next_time = schedule.next_execution_time(done)
            return next_time, MissedSlots(1 + count, more, following, last or following, next_time)
        next_time = schedule.next_execution_time(done)
        if not schedule.is_deterministic:
            return next_time, None  # its slots follow the runs: none can pass without one
        count, more, last = _slots_between(schedule, scheduled, done)
        if count == 0 or last is None:
            return next_time, None
        return next_time, MissedSlots(count, more, schedule.next_execution_time(scheduled), last, next_time)

    # ------------------------------------------------------------------ value object
    def __str__(self) -> str:
        if self._kind == "skip" and self._grace != DEFAULT_GRACE:
            return f"skip|{_iso(self._grace)}"
        if self._kind == "run_all" and self._limit != DEFAULT_LIMIT:
            return f"run_all|{self._limit}"
        return self._kind

    def __repr__(self) -> str:
        return f"MisfirePolicy.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MisfirePolicy):
            return NotImplemented
        return (self._kind, self._grace, self._limit) == (other._kind, other._grace, other._limit)

    def __hash__(self) -> int:
        return hash((self._kind, self._grace, self._limit))


def _slots_between(
    schedule: Schedule, after: datetime, until: datetime, cap: int = COUNT_CAP
) -> tuple[int, bool, datetime | None]:
    """The slots strictly after ``after`` and at or before ``until``: how many (at most
    ``cap``), whether there were more, and the last one counted."""
    count, last, slot = 0, None, schedule.next_execution_time(after)
    while slot <= until:
        if count == cap:
            return count, True, last
        count, last = count + 1, slot
        slot = schedule.next_execution_time(slot)
    return count, False, last


def _iso(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"PT{int(seconds)}S" if seconds == int(seconds) else f"PT{seconds}S"
