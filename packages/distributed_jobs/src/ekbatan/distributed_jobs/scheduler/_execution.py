"""One row of ``scheduled_tasks`` and the facts about one finished run of it."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._instances import TaskInstance

#: ``priority`` presets (higher runs first when priority is enabled)
PRIORITY_HIGH = 90
PRIORITY_MEDIUM = 50
PRIORITY_LOW = 10

#: characters in a task name or instance id: db-scheduler's MySQL/MariaDB table declares both
#: varchar(100); the same limit holds on every dialect so a schedule never works on one and fails
#: (or, in non-strict mode, is cut short into another key) on another
MAX_KEY_LENGTH = 100


@dataclass(frozen=True, slots=True)
class TaskInstanceId:
    """The key of an execution: ``(task_name, task_instance)``."""

    task_name: str
    id: str

    def __str__(self) -> str:
        return f"{self.task_name}/{self.id}"


@dataclass(frozen=True, slots=True)
class Execution:
    """A row as read from the table.

    ``version`` is the optimistic-lock counter and the fencing token: every state-changing
    write names the version it read and bumps it, so a writer holding an older version (a
    stalled instance whose execution was revived elsewhere) changes nothing.
    """

    task_name: str
    instance_id: str
    execution_time: datetime
    picked: bool = False
    picked_by: str | None = None
    last_success: datetime | None = None
    last_failure: datetime | None = None
    consecutive_failures: int = 0
    last_heartbeat: datetime | None = None
    version: int = 1
    priority: int | None = None
    raw_data: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def key(self) -> TaskInstanceId:
        return TaskInstanceId(self.task_name, self.instance_id)

    def with_changes(self, **changes: Any) -> Execution:
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        return f"{self.task_name}/{self.instance_id}@v{self.version}"


class ExecutionResult(enum.Enum):
    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ExecutionComplete:
    """What happened when an execution ran: handed to completion and failure handlers."""

    execution: Execution
    time_started: datetime
    time_done: datetime
    result: ExecutionResult
    cause: BaseException | None = None
    instance: TaskInstance[Any] | None = None

    @classmethod
    def success(
        cls, execution: Execution, time_started: datetime, time_done: datetime, instance: Any = None
    ) -> ExecutionComplete:
        return cls(execution, time_started, time_done, ExecutionResult.OK, None, instance)

    @classmethod
    def failure(
        cls,
        execution: Execution,
        time_started: datetime,
        time_done: datetime,
        cause: BaseException | None,
        instance: Any = None,
    ) -> ExecutionComplete:
        return cls(execution, time_started, time_done, ExecutionResult.FAILED, cause, instance)

    @property
    def is_success(self) -> bool:
        return self.result is ExecutionResult.OK

    @property
    def duration_seconds(self) -> float:
        return (self.time_done - self.time_started).total_seconds()
