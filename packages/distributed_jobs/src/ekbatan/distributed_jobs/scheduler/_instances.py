"""Task instances: what a caller schedules (a task name, an id, optional data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId

T = TypeVar("T")

_UNSET: Any = object()


class TaskInstance(Generic[T]):
    """``task_name`` + ``id`` + data. Data read from the table is decoded lazily, on first
    access, so an undecodable payload fails that one execution, inside its handler."""

    __slots__ = ("_data", "_supplier", "id", "priority", "task_name")

    def __init__(
        self,
        task_name: str,
        id: str,
        data: T | None = None,
        *,
        priority: int | None = None,
        data_supplier: Callable[[], T] | None = None,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError(f"task instance id must be a non-empty string, got {id!r}")
        self.task_name = task_name
        self.id = id
        self.priority = priority
        self._data = _UNSET if data_supplier is not None else data
        self._supplier = data_supplier

    @property
    def data(self) -> T | None:
        # _UNSET only ever stands beside a supplier
        if self._data is _UNSET and self._supplier is not None:
            self._data = self._supplier()
        return self._data

    @property
    def key(self) -> TaskInstanceId:
        return TaskInstanceId(self.task_name, self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskInstance) and (self.task_name, self.id) == (other.task_name, other.id)

    def __hash__(self) -> int:
        return hash((self.task_name, self.id))

    def __repr__(self) -> str:
        return f"TaskInstance({self.task_name!r}, {self.id!r})"


@dataclass(frozen=True, slots=True)
class SchedulableInstance(Generic[T]):
    """An instance together with the rule that gives its execution time."""

    instance: TaskInstance[T]
    time_rule: Callable[[datetime], datetime]

    def execution_time(self, now: datetime) -> datetime:
        return self.time_rule(now)


#: ``(task_name, instance_id)``, a :class:`TaskInstanceId`, or a :class:`TaskInstance`
InstanceKey = TaskInstanceId | TaskInstance[Any] | tuple[str, str]


def instance_key(key: InstanceKey) -> TaskInstanceId:
    """The key an :data:`InstanceKey` names; a clear error for anything else."""
    if isinstance(key, TaskInstanceId):
        return key
    if isinstance(key, TaskInstance):
        return key.key
    if isinstance(key, tuple) and len(key) == 2:
        return TaskInstanceId(str(key[0]), str(key[1]))
    raise TypeError(
        f"expected a TaskInstance, a TaskInstanceId or a (task_name, instance_id) tuple, got {key!r}"
    )
