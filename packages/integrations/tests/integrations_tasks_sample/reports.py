"""A recurring task whose instances carry their own schedule."""

from __future__ import annotations

import threading

from ekbatan.distributed_jobs import recurring_task_with_persistent_schedule
from ekbatan.distributed_jobs.scheduler import ExecutionContext, PlainScheduleAndData, TaskInstance

#: the instance ids of the report runs, in order
REPORTS: list[str] = []
_LOCK = threading.Lock()


@recurring_task_with_persistent_schedule("report")
def report(instance: TaskInstance[PlainScheduleAndData], ctx: ExecutionContext) -> None:
    with _LOCK:
        REPORTS.append(instance.id)
