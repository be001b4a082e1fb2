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
#: a succeeded run is queued as it is only while its task data is at most this many bytes: the
#: run holds its data while it waits (a row holds it only if asked to keep it), and a queue of
#: 20,000 runs of large data would hold all of it
DEFER_DATA_LIMIT = 1024


class ExecutionHistory(SchedulerListener):
    def __init__(self, settings: HistorySettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.table: HistoryTable | None = None
        self.writer: HistoryWriter[ExecutionComplete] | None = None
        self.prune_task: Task[Any] = Tasks.recurring(
            PRUNE_TASK, Schedules.fixed_delay(settings.retention.prune_every)
        ).execute(self._prune)

    def bind(self, repository: TaskRepository) -> None:
        """Write to ``repository``'s history table (known once the scheduler has built it)."""
        self.table = HistoryTable(repository)
        self.writer = HistoryWriter(self.table, self._succeeded_row)

    # ------------------------------------------------------------------ recording
    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        if complete.execution.task_name == PRUNE_TASK:
            return  # the history of pruning the history is noise
        if complete.is_success:
            data = complete.execution.raw_data
            if data is None or len(data) <= DEFER_DATA_LIMIT:
                # handed over as it is: the writer's thread builds its row (see the writer)
                assert self.writer is not None, "bind() first"
                self.writer.submit(complete)
                return
        result = run_result(complete)  # here: how it failed is known on this thread only
        self._record(complete.execution, result, complete.time_started, complete.time_done, complete.cause)

    def _succeeded_row(self, complete: ExecutionComplete) -> HistoryRow:
        execution, started, finished = complete.execution, complete.time_started, complete.time_done
        return self._row(execution, RunResult.SUCCEEDED, started, finished, _NO_ERROR, None, None)

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
        self.writer.submit(self._row(execution, result, started, finished, error, message, execution_time))

    def _row(
        self,
        execution: Execution,
        result: RunResult,
        started: datetime | None,
        finished: datetime,
        error: ErrorRecord,
        message: str | None,
        execution_time: datetime | None,
    ) -> HistoryRow:
        return (  # the history's columns, in their order
            execution.task_name,
            execution.instance_id,
            execution_time or execution.execution_time,
            execution.picked_by,
            execution.version,
            started,
            finished,
            None if started is None else round((finished - started).total_seconds() * 1000),
            result.value,
            execution.consecutive_failures + 1,
            error.error_class,
            message or error.message,
            error.traceback,
            execution.raw_data if self.settings.keep_task_data else None,
        )

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
