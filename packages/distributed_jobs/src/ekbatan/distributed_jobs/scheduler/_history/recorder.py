"""Recording each finished run into the history, and the task that prunes it.

:class:`ExecutionHistory` is what a scheduler with history on holds: a listener turning each
completed run (and each dead execution handled) into a row for the writer, the writer itself,
and the recurring pruning task that keeps the table within its retention.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete
from ekbatan.distributed_jobs.scheduler._history.records import HistorySettings, RunResult
from ekbatan.distributed_jobs.scheduler._history.table import HistoryRow, HistoryTable
from ekbatan.distributed_jobs.scheduler._history.writer import HistoryWriter
from ekbatan.distributed_jobs.scheduler._observability import SchedulerListener
from ekbatan.distributed_jobs.scheduler._table.held_rows import ErrorRecord
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._tasks.builders import Tasks
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations, run_result
from ekbatan.distributed_jobs.scheduler.schedules import MissedSlots, Schedules

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.history")

#: the recurring task that prunes the history (one node of the cluster runs each slot)
PRUNE_TASK = "ekbatan-history-prune"
#: seconds one pruning run may take before it leaves the rest to the next slot
PRUNE_BUDGET = 30.0
_NO_ERROR = ErrorRecord(None, None, None)
#: a run's own fields, as a succeeded run is queued: its task name, instance, execution time,
#: picked by, version, started, finished, consecutive failures before it, and its data (``None``
#: unless kept); every row is made of these and what the run's result adds
RunFields = tuple[str, str, datetime, str | None, int, datetime | None, datetime, int, bytes | None]


class ExecutionHistory(SchedulerListener):
    def __init__(self, settings: HistorySettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.table: HistoryTable | None = None
        self.writer: HistoryWriter[RunFields] | None = None
        self.prune_task: Task[Any] = Tasks.recurring(
            PRUNE_TASK, Schedules.fixed_delay(settings.retention.prune_every)
        ).execute(self._prune)

    def bind(self, repository: TaskRepository) -> None:
        """Write to ``repository``'s history table (known once the scheduler has built it)."""
        self.table = HistoryTable(repository)
        self.writer = HistoryWriter(self.table, self._succeeded_row)

    # ------------------------------------------------------------------ recording
    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        execution = complete.execution
        if execution.task_name == PRUNE_TASK:
            return  # the history of pruning the history is noise
        if complete.is_success:
            assert self.writer is not None, "bind() first"
            # handed over as its fields, a tuple of plain values, and made a row on the writer's
            # thread (see the writer). Not the run object: thousands of those waiting for the next
            # flush are scanned by the garbage collector (on whichever thread allocates: mostly
            # the poller) and keep their memory from reuse, which inside a busy scheduler made
            # every thread's work dearer; the task data is in it only when it is to be kept
            self.writer.submit(self._fields(execution, complete.time_started, complete.time_done))
            return
        result = run_result(complete)  # here: how it failed is known on this thread only
        self._record(execution, result, complete.time_started, complete.time_done, complete.cause)

    def _fields(
        self,
        execution: Execution,
        started: datetime | None,
        finished: datetime,
        execution_time: datetime | None = None,
    ) -> RunFields:
        return (
            execution.task_name,
            execution.instance_id,
            execution_time or execution.execution_time,
            execution.picked_by,
            execution.version,
            started,
            finished,
            execution.consecutive_failures,
            execution.raw_data if self.settings.keep_task_data else None,
        )

    @staticmethod
    def _succeeded_row(run: RunFields) -> HistoryRow:
        return _row(run, RunResult.SUCCEEDED, _NO_ERROR, None)

    def dead_execution_handled(self, execution: Execution, ops: ExecutionOperations, now: datetime) -> None:
        """A dead execution (its worker stopped heartbeating) was handled: its run was abandoned."""
        result = RunResult.REVIVED if ops.outcome in ("rescheduled", "replaced") else RunResult.ABANDONED
        self._record(execution, result, execution.last_heartbeat, now, None)

    def on_slots_missed(self, execution: Execution, missed: MissedSlots) -> None:
        self._record(
            execution,
            RunResult.MISSED,
            None,
            self.clock.now(),
            None,
            message=f"{missed.describe()}; next run at {missed.next_time.isoformat()}",
            execution_time=missed.first,
        )

    def _record(
        self,
        execution: Execution,
        result: RunResult,
        started: datetime | None,
        finished: datetime,
        cause: BaseException | None,
        *,
        message: str | None = None,
        execution_time: datetime | None = None,
    ) -> None:
        assert self.writer is not None, "bind() first"
        error = _NO_ERROR if cause is None else ErrorRecord.of(cause)
        run = self._fields(execution, started, finished, execution_time)
        self.writer.submit(_row(run, result, error, message))

    # ------------------------------------------------------------------ pruning
    def _prune(self, instance: Any, ctx: Any) -> None:
        assert self.table is not None, "bind() first"
        # bounded: a backlog of expired runs is worked off over several slots, and a stopping
        # scheduler is not held up by it
        removed = self.table.prune(
            self.clock.now(),
            self.settings.retention,
            budget=PRUNE_BUDGET,
            stop=lambda: bool(ctx.is_shutting_down),
        )
        if removed:
            log.info("pruned %d run(s) from %s", removed, self.table.name)

    def start(self) -> None:
        if self.writer is not None:
            self.writer.start()

    def stop(self) -> None:
        if self.writer is not None:
            self.writer.stop()


def _row(run: RunFields, result: RunResult, error: ErrorRecord, message: str | None) -> HistoryRow:
    """The history's columns, in their order: the run's fields and what its result adds."""
    name, instance, due, picked_by, version, started, finished, failures, data = run
    duration = None if started is None else round((finished - started).total_seconds() * 1000)
    return (
        name, instance, due, picked_by, version, started, finished, duration, result.value,
        failures + 1, error.error_class, message or error.message, error.traceback, data,
    )  # fmt: skip
