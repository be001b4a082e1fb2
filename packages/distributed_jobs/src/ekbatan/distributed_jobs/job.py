"""``DistributedJob``: a recurring piece of work that exactly one instance of the cluster runs
per scheduled slot, and the ``@distributed_job`` marker that lets integrations discover it."""

from __future__ import annotations

import abc
from collections.abc import Awaitable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ekbatan.distributed_jobs.marks import ClassMark

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler import ExecutionContext, HeartbeatState, Schedule

J = TypeVar("J", bound=type)


class JobContext:
    """What :meth:`DistributedJob.execute` receives.

    ``heartbeat_state.fraction_dead`` is 0.0 right after a successful heartbeat and 1.0 when
    another instance may take this execution over; a job looping over items can return early
    once it exceeds ~0.5 (returning early is a normal success). ``fencing_token`` is the row's
    version while this run holds it — pass it to your own writes to reject a stale run's late
    writes.
    """

    __slots__ = ("execution_context",)

    def __init__(self, execution_context: ExecutionContext) -> None:
        self.execution_context = execution_context

    @property
    def job_name(self) -> str:
        return self.execution_context.execution.task_name

    @property
    def heartbeat_state(self) -> HeartbeatState:
        return self.execution_context.heartbeat_state

    @property
    def is_shutting_down(self) -> bool:
        return self.execution_context.scheduler_state.is_shutting_down

    @property
    def fencing_token(self) -> int:
        return self.execution_context.execution.version

    @property
    def execution_time(self) -> datetime:
        return self.execution_context.execution.execution_time

    @property
    def picked_by(self) -> str | None:
        return self.execution_context.execution.picked_by

    @property
    def consecutive_failures(self) -> int:
        return self.execution_context.execution.consecutive_failures

    def __repr__(self) -> str:
        return f"JobContext({self.job_name!r}, fencing_token={self.fencing_token})"


class DistributedJob(abc.ABC):
    """Subclass, implement the three methods, register with a :class:`JobRegistry`.

    * ``name()`` — cluster-wide unique and stable across restarts: it is the row's key.
    * ``schedule()`` — any engine schedule (fixed delay, daily, cron, disabled, ``Schedules.parse``).
    * ``execute(ctx)`` — the work, a plain method or ``async def``. Raise to record a failure;
      the next slot still runs. The same slot can run twice (an execution revived while the
      original still runs): make it idempotent.

    Optionally, ``misfire_policy()`` returns what becomes of slots that pass without a run
    (a ``MisfirePolicy`` or its string form, e.g. ``"skip|PT5M"``); without it the registry's
    ``misfire_policy`` applies (``ekbatan.jobs.misfire-policy``), by default ``run_once``.

    The registry reads ``name()``, ``schedule()`` and ``misfire_policy()`` once, when it is built.
    """

    @abc.abstractmethod
    def name(self) -> str: ...

    @abc.abstractmethod
    def schedule(self) -> Schedule: ...

    @abc.abstractmethod
    def execute(self, ctx: JobContext) -> Awaitable[None] | None: ...


_MARK = ClassMark(
    "__ekbatan_distributed_job__",
    DistributedJob,
    "distributed_job",
    "subclass ekbatan.distributed_jobs.DistributedJob",
)


def distributed_job(cls: J) -> J:
    """Mark a :class:`DistributedJob` subclass for discovery by the integrations.

    Registers nothing and creates nothing: it only tags the class.
    """
    return _MARK.mark(cls)


def is_distributed_job(obj: Any) -> bool:
    """True for a class marked with ``@distributed_job`` (not for its unmarked subclasses)."""
    return _MARK.marked(obj)
