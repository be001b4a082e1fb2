"""Repositories and serializers for tests that talk to the scheduler's table below the scheduler."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._polling.wakeups import channel_for
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect


def notifying_repository(engine: sa.Engine, tasks: Sequence[Task], picked_by: str) -> TaskRepository:
    """A repository on ``scheduled_tasks`` that announces what it schedules, as a scheduler's
    does on PostgreSQL (and so can claim an announced execution)."""
    return TaskRepository(
        engine,
        resolve_dialect(engine),
        TaskResolver(tasks),
        picked_by=picked_by,
        notify_channel=channel_for("scheduled_tasks"),
    )


class RawBytesSerializer:
    """Writes the bytes it is given as they are: a way to put arbitrary payloads in the table."""

    def serialize(self, data: object) -> bytes | None:
        return data  # type: ignore[return-value]

    def deserialize(self, data_type: object, raw: bytes | None) -> object:
        return raw
