"""Exceptions the engine raises. All derive from :class:`SchedulerError`."""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class of every error raised by the scheduler engine."""


class TableSchemaError(SchedulerError, ValueError):
    """The ``scheduled_tasks`` table lacks what an option needs (the ``priority`` column for
    ``enable_priority()``); the message gives the DDL that adds it."""


class TaskInstanceError(SchedulerError):
    """Something is wrong with one task instance (insert failed, duplicate rows, …)."""

    def __init__(self, message: str, task_name: str, instance_id: str) -> None:
        super().__init__(message)
        self.task_name = task_name
        self.instance_id = instance_id


class TaskKeyTooLongError(TaskInstanceError, ValueError):
    """A task name or instance id longer than the ``scheduled_tasks`` key columns hold."""


class TaskDataTooLargeError(TaskInstanceError, ValueError):
    """Encoded task data larger than the database's ``task_data`` column holds."""


class TaskInstanceNotFoundError(TaskInstanceError):
    def __init__(self, task_name: str, instance_id: str) -> None:
        super().__init__(
            f"no scheduled execution {task_name}/{instance_id} (it may have completed or been cancelled)",
            task_name,
            instance_id,
        )


class TaskInstanceCurrentlyExecutingError(TaskInstanceError):
    def __init__(self, task_name: str, instance_id: str) -> None:
        super().__init__(
            f"execution {task_name}/{instance_id} is currently picked by a scheduler and cannot be "
            "changed; only modify executions that are not picked, ideally ones due well in the future",
            task_name,
            instance_id,
        )


class HoldError(SchedulerError, ValueError):
    """A pause, resumption or retry that cannot be done as asked (nothing paused or dead by
    that name, or its key is scheduled again); the message says what to do instead."""


class ExecutionTimeoutError(SchedulerError, TimeoutError):
    """An execution ran past its task's timeout (``.timeout(...)`` on the task's builder).

    Raised into an ``async`` body (which is cancelled), by ``ctx.check_cancelled()`` in a thread
    body, and recorded as the run's failure, which goes to the task's failure handler."""

    def __init__(self, task_name: str, instance_id: str, timeout: object) -> None:
        super().__init__(f"execution {task_name}/{instance_id} ran past its timeout of {timeout}")
        self.task_name = task_name
        self.instance_id = instance_id
        self.timeout = timeout


class RowLockedError(SchedulerError):
    """A write gave up waiting for a row lock another transaction held past the bound it was
    given (the process holding it may be frozen in the middle of its own write)."""


class ExecutionError(SchedulerError):
    """A versioned write to an execution matched no row: another writer got there first.

    ``version`` is the fencing token the write was guarded by.
    """

    def __init__(self, message: str, task_name: str, instance_id: str, version: int) -> None:
        super().__init__(f"{message} (execution {task_name}/{instance_id}, version {version})")
        self.task_name = task_name
        self.instance_id = instance_id
        self.version = version


class FailedToScheduleBatchError(SchedulerError):
    """A batch insert failed, typically because one of its keys already exists."""


class SerializationError(SchedulerError):
    """Task data could not be encoded or decoded."""


class DataClassMismatchError(SchedulerError):
    """Decoded task data is not of the type the caller asked for."""
