"""Read-only views of the table for the client: listings, filters, scrolling, summaries."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._execution import Execution, TaskInstanceId


@dataclass(frozen=True, slots=True)
class ExecutionTimeAndId:
    """A keyset-scrolling cursor: a row's ``execution_time`` and ``task_instance``."""

    execution_time: datetime
    instance_id: str

    def encode(self) -> str:
        seconds = int(self.execution_time.timestamp() // 1)
        nanos = self.execution_time.microsecond * 1000
        return base64.b64encode(f"{seconds},{nanos}:{self.instance_id}".encode()).decode("ascii")

    @classmethod
    def decode(cls, cursor: str) -> ExecutionTimeAndId:
        try:
            text = base64.b64decode(cursor.encode("ascii")).decode("utf-8")
            stamp, instance_id = text.split(":", 1)
            seconds, nanos = stamp.split(",", 1)
            instant = datetime.fromtimestamp(int(seconds), UTC).replace(microsecond=int(nanos) // 1000)
        except Exception as exc:
            raise ValueError(f"not a scrolling cursor: {cursor!r}") from exc
        return cls(instant, instance_id)


@dataclass(frozen=True, slots=True)
class ScheduledExecutionsFilter:
    """Which rows a listing returns. ``ScheduledExecutionsFilter.all()`` includes rows of task
    names this process does not know (their data stays raw bytes)."""

    include_unresolved: bool = True
    picked: bool | None = None
    limit: int | None = None
    after: ExecutionTimeAndId | None = None
    before: ExecutionTimeAndId | None = None

    @classmethod
    def all(cls) -> ScheduledExecutionsFilter:
        return cls()

    @classmethod
    def only_resolved(cls) -> ScheduledExecutionsFilter:
        return cls(include_unresolved=False)

    def with_picked(self, picked: bool | None) -> ScheduledExecutionsFilter:
        return _replace(self, picked=picked)

    def with_limit(self, limit: int) -> ScheduledExecutionsFilter:
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        return _replace(self, limit=limit)

    def with_after(self, cursor: ExecutionTimeAndId) -> ScheduledExecutionsFilter:
        return _replace(self, after=cursor)

    def with_before(self, cursor: ExecutionTimeAndId) -> ScheduledExecutionsFilter:
        return _replace(self, before=cursor)


def _replace(f: ScheduledExecutionsFilter, **changes: Any) -> ScheduledExecutionsFilter:
    from dataclasses import replace

    return replace(f, **changes)


class ScheduledExecution:
    """A row as the client presents it; ``data`` is decoded with the task's data type when
    this process knows the task, else ``data`` is the raw bytes (``has_raw_data`` is True)."""

    __slots__ = ("_decode", "_decoded", "execution")

    def __init__(self, execution: Execution, decode: Any = None) -> None:
        self.execution = execution
        self._decode = decode
        self._decoded: Any = _PENDING

    @property
    def key(self) -> TaskInstanceId:
        return self.execution.key

    @property
    def task_name(self) -> str:
        return self.execution.task_name

    @property
    def instance_id(self) -> str:
        return self.execution.instance_id

    @property
    def execution_time(self) -> datetime:
        return self.execution.execution_time

    @property
    def has_raw_data(self) -> bool:
        return self._decode is None

    @property
    def raw_data(self) -> bytes | None:
        return self.execution.raw_data

    @property
    def data(self) -> Any:
        if self._decode is None:
            return self.execution.raw_data
        if self._decoded is _PENDING:
            self._decoded = self._decode(self.execution.raw_data)
        return self._decoded

    @property
    def last_success(self) -> datetime | None:
        return self.execution.last_success

    @property
    def last_failure(self) -> datetime | None:
        return self.execution.last_failure

    @property
    def consecutive_failures(self) -> int:
        return self.execution.consecutive_failures

    @property
    def is_picked(self) -> bool:
        return self.execution.picked

    @property
    def picked_by(self) -> str | None:
        return self.execution.picked_by

    @property
    def cursor(self) -> ExecutionTimeAndId:
        return ExecutionTimeAndId(self.execution.execution_time, self.execution.instance_id)

    def __repr__(self) -> str:
        return f"ScheduledExecution({self.execution!s}, at={self.execution_time.isoformat()})"


_PENDING: Any = object()


@dataclass(frozen=True, slots=True)
class TaskSummary:
    task_name: str
    instance_count: int
    running_count: int
    failing_count: int
    scheduled_count: int
    earliest_execution_time: datetime | None
    last_success: datetime | None
    last_failure: datetime | None
    max_consecutive_failures: int
    #: not picked and due at the time the summary was asked about (None: not asked)
    due_count: int | None = None
