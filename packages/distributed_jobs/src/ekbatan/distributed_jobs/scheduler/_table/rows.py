"""The row shape of ``scheduled_tasks`` and the guards every versioned write shares."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._errors import ExecutionError, TaskKeyTooLongError
from ekbatan.distributed_jobs.scheduler._execution import MAX_KEY_LENGTH, Execution

COLUMNS = (
    "task_name, task_instance, task_data, execution_time, picked, picked_by, last_success, "
    "last_failure, consecutive_failures, last_heartbeat, version, priority"
)
#: the same row shape from a table created without db-scheduler's optional ``priority`` column
COLUMNS_WITHOUT_PRIORITY = COLUMNS.removesuffix("priority") + "NULL"

#: A caller-supplied place to run statements: a Connection, or an ORM Session.
ConnectionLike = Any

#: the default of a write's ``new_data``: keep the stored task data (None would store SQL NULL)
KEEP_DATA: Any = object()


def check_key(task_name: str, instance_id: str) -> None:
    """Refuse a key the ``scheduled_tasks`` table cannot hold, naming it and the limit."""
    for what, value in (("task name", task_name), ("instance id", instance_id)):
        if len(value) > MAX_KEY_LENGTH:
            raise TaskKeyTooLongError(
                f"{what} {value[:40]!r}… is {len(value)} characters, more than the {MAX_KEY_LENGTH} the "
                f"scheduled_tasks key columns hold; use a shorter {what} (e.g. a hash or a database id "
                "of the thing it names) and keep the details in the task data",
                task_name,
                instance_id,
            )


class NewExecution:
    """A row to insert; its key is checked against :data:`MAX_KEY_LENGTH` here."""

    __slots__ = ("execution_time", "instance_id", "priority", "raw_data", "task_name")

    def __init__(
        self,
        task_name: str,
        instance_id: str,
        execution_time: datetime,
        raw_data: bytes | None = None,
        priority: int | None = None,
    ) -> None:
        check_key(task_name, instance_id)
        self.task_name = task_name
        self.instance_id = instance_id
        self.execution_time = execution_time
        self.raw_data = raw_data
        self.priority = priority


def versioned_key(execution: Execution) -> dict[str, Any]:
    """Bind parameters naming a row at the version the caller read."""
    return {
        "task_name": execution.task_name,
        "task_instance": execution.instance_id,
        "version": execution.version,
    }


def expect_one_row(count: int, what: str, execution: Execution) -> None:
    """A versioned write must hit exactly its row; anything else means another writer won."""
    if count != 1:
        raise ExecutionError(
            f"expected to {what} 1 row, changed {count}; another writer changed it first",
            execution.task_name,
            execution.instance_id,
            execution.version,
        )


def as_connection(connection: ConnectionLike) -> sa.Connection:
    """Accept a Core ``Connection`` or an ORM ``Session`` (its current connection)."""
    if isinstance(connection, sa.Connection):
        return connection
    if hasattr(connection, "connection") and callable(connection.connection):
        connection_of_session: sa.Connection = connection.connection()
        return connection_of_session
    raise TypeError(
        f"expected an SQLAlchemy Connection or Session to run on, got {type(connection).__name__}"
    )
