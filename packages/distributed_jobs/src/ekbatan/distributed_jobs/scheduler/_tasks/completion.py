"""What to do with an execution after its handler returned normally."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ekbatan.distributed_jobs.scheduler._execution import ExecutionComplete
from ekbatan.distributed_jobs.scheduler._instances import TaskInstance
from ekbatan.distributed_jobs.scheduler._table.rows import KEEP_DATA
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations
from ekbatan.distributed_jobs.scheduler.schedules import MisfirePolicy, Schedule

_RUN_ONCE = MisfirePolicy.run_once()


@runtime_checkable
class CompletionHandler(Protocol):
    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None: ...


class OnCompleteRemove:
    """Delete the row (one-time tasks)."""

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        ops.remove()

    def __repr__(self) -> str:
        return "OnCompleteRemove()"


class OnCompleteReschedule:
    """Move the row to the schedule's next slot after completion, optionally with new data.

    ``misfire`` decides which slot that is when slots passed meanwhile (the default,
    ``run_once``: the first slot after the run ended); the slots left unrun are reported.
    """

    def __init__(
        self, schedule: Schedule, new_data: Any = KEEP_DATA, misfire: MisfirePolicy = _RUN_ONCE
    ) -> None:
        self.schedule = schedule
        self.new_data = new_data
        self.misfire = misfire

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        scheduled = complete.execution.execution_time
        next_time, missed = self.misfire.after_run(self.schedule, scheduled, complete.time_done)
        ops.reschedule(complete, next_time, self.new_data)
        if missed is not None:
            ops.slots_missed(missed)

    def __repr__(self) -> str:
        return f"OnCompleteReschedule({self.schedule!r})"


class OnCompleteRescheduleFromData:
    """Move the row to the next slot of the schedule its task data carries (recurring tasks
    with a persistent schedule), storing ``new_data`` unless it is :data:`KEEP_DATA`."""

    def __init__(self, new_data: Any) -> None:
        self.new_data = new_data

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        # task data is whatever the task's data type says: Any, as it was serialized
        stored: Any = complete.instance.data if complete.instance is not None else None
        source = stored if self.new_data is KEEP_DATA else self.new_data
        ops.reschedule(complete, source.schedule.next_execution_time(complete.time_done), self.new_data)


class OnCompleteRescheduleTo:
    """Move the row to a fixed instant, optionally with new data (custom tasks)."""

    def __init__(self, execution_time: datetime, new_data: Any = KEEP_DATA) -> None:
        self.execution_time = execution_time
        self.new_data = new_data

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        ops.reschedule(complete, self.execution_time, self.new_data)


class OnCompleteReplace:
    """Replace the execution by another instance, due now by default."""

    def __init__(
        self,
        new_instance: Callable[[TaskInstance[Any]], TaskInstance[Any]] | TaskInstance[Any],
        execution_time: datetime | None = None,
    ) -> None:
        self.new_instance = new_instance
        self.execution_time = execution_time

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        instance = self.new_instance
        if callable(instance) and not isinstance(instance, TaskInstance):
            # a run execution's completion always carries its instance (Optional only for the
            # dead-execution path, which never completes)
            instance = instance(complete.instance)  # type: ignore[arg-type]
        ops.remove_and_schedule_new(instance, self.execution_time or complete.time_done)


class OnCompleteDoNothing:
    """Leave the row picked: it will be found dead and handled by the dead-execution handler."""

    def complete(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        return None
