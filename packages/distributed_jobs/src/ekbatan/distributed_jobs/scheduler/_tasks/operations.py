"""The writes a completion, failure or dead-execution handler may make to the execution it
was given — always against the version read when the execution was picked."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._errors import ExecutionError
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete
from ekbatan.distributed_jobs.scheduler._history.records import RunResult
from ekbatan.distributed_jobs.scheduler._instances import TaskInstance
from ekbatan.distributed_jobs.scheduler._serializers import Serializer
from ekbatan.distributed_jobs.scheduler._table.held_rows import ErrorRecord, HoldState
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import KEEP_DATA
from ekbatan.distributed_jobs.scheduler.schedules import MissedSlots

#: the execution a failure handler on this thread last kept dead: the listeners of the run's
#: completion, called on the same thread right after the handler, see it ``dead`` (run_result)
dead_lettered: ContextVar[Execution | None] = ContextVar("ekbatan_dead_lettered", default=None)


def run_result(complete: ExecutionComplete) -> RunResult:
    """How a completed run ended: succeeded, failed, or dead (its failure handler kept it as a
    dead letter — told by the worker thread's ``dead_lettered``, set in that same run)."""
    if complete.is_success:
        return RunResult.SUCCEEDED
    if dead_lettered.get() is complete.execution:
        return RunResult.DEAD
    return RunResult.FAILED


class ExecutionOperations:
    def __init__(
        self,
        repository: TaskRepository,
        execution: Execution,
        serializer: Serializer,
        on_scheduled: Callable[[str, str, datetime], None] | None = None,
        remover: Callable[[Execution], None] | None = None,
        on_missed: Callable[[Execution, MissedSlots], None] | None = None,
    ) -> None:
        self.repository = repository
        self._on_missed = on_missed
        self.execution = execution
        self.serializer = serializer
        self._on_scheduled = on_scheduled
        self._remover = remover or repository.remove
        #: what the handler made of the execution: "removed", "rescheduled", "replaced", "dead"
        self.outcome: str | None = None

    def remove(self) -> None:
        self._remover(self.execution)
        self.outcome = "removed"

    def dead_letter(self, complete: ExecutionComplete, reason: str | None = None) -> None:
        """Take the execution out of the schedule and keep it as *dead*, with the error its
        last run ended with, until an operator retries or cancels it."""
        e = self.execution
        failures = e.consecutive_failures + (0 if complete.is_success else 1)
        kept = e.with_changes(
            consecutive_failures=failures,
            last_failure=e.last_failure if complete.is_success else complete.time_done,
        )
        held = self.repository.hold(
            kept,
            HoldState.DEAD,
            now=complete.time_done,
            by=e.picked_by or self.repository.picked_by,
            reason=reason or f"failed {failures} time(s) in a row",
            error=ErrorRecord.of(complete.cause),
        )
        if not held:
            raise ExecutionError("dead letter matched no row", e.task_name, e.instance_id, e.version)
        self.outcome = "dead"
        dead_lettered.set(e)

    def reschedule(self, complete: ExecutionComplete, next_time: datetime, new_data: Any = KEEP_DATA) -> None:
        """Reschedule with the bookkeeping ``complete`` implies: a success resets the failure
        count, a failure adds one to it; the other timestamp keeps its stored value."""
        e = self.execution
        last_success: datetime | None
        last_failure: datetime | None
        if complete.is_success:
            last_success, last_failure, failures = complete.time_done, e.last_failure, 0
        else:
            last_success, last_failure, failures = (
                e.last_success,
                complete.time_done,
                e.consecutive_failures + 1,
            )
        raw = KEEP_DATA if new_data is KEEP_DATA else self.serializer.serialize(new_data)
        self.repository.reschedule(
            e,
            next_time,
            last_success=last_success,
            last_failure=last_failure,
            consecutive_failures=failures,
            new_data=raw,
        )
        self.outcome = "rescheduled"
        if self._on_scheduled is not None:
            self._on_scheduled(e.task_name, e.instance_id, next_time)

    def slots_missed(self, missed: MissedSlots) -> None:
        """Report slots of this recurring execution that will not run (its misfire policy)."""
        if self._on_missed is not None:
            self._on_missed(self.execution, missed)

    def remove_and_schedule_new(self, instance: TaskInstance[Any], execution_time: datetime) -> None:
        """Replace this execution by ``instance`` at ``execution_time`` (one atomic update)."""
        self.repository.replace(
            self.execution,
            instance.task_name,
            instance.id,
            execution_time,
            self.serializer.serialize(instance.data),
        )
        self.outcome = "replaced"
        if self._on_scheduled is not None:
            self._on_scheduled(instance.task_name, instance.id, execution_time)
