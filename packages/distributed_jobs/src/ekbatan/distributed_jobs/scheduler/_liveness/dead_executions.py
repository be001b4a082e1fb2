"""Dead-execution detection, run by every instance every 2 × heartbeat interval.

An execution is dead when it is picked and its ``last_heartbeat`` is older than
``heartbeat_interval × missed_heartbeats_limit``. Any instance may declare any instance's
execution dead; the handler's versioned write makes concurrent detectors harmless (one wins,
the others update nothing). The same pass deletes rows of task names nobody here knows once
they are older than ``delete_unresolved_after``, and first looks for due rows of such names
(lock-and-fetch never claims them, so the poll does not meet them).

Each dead execution's write waits at most :data:`REVIVE_LOCK_WAIT` for its row: a process frozen
in the middle of its heartbeat (SIGSTOP, a paused VM) keeps that row locked until its connection
dies, and a pass waiting there (forever on PostgreSQL, 50 s a try on MySQL) would revive nothing
else meanwhile. The locked one is looked at again on the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._errors import ExecutionError, RowLockedError
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete
from ekbatan.distributed_jobs.scheduler._observability import Listeners, SchedulerEventType
from ekbatan.distributed_jobs.scheduler._serializers import Serializer
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.dead_executions")

#: seconds a dead execution's write waits for its row before the pass moves on (a live writer
#: holds it for milliseconds)
REVIVE_LOCK_WAIT = 2.0


class DeadExecutionDetector:
    def __init__(
        self,
        repository: TaskRepository,
        serializer: Serializer,
        clock: Clock,
        listeners: Listeners,
        dead_after: timedelta,
        delete_unresolved_after: timedelta,
        on_scheduled: Callable[[str, str, datetime], None] | None = None,
        on_handled: Callable[[Execution, ExecutionOperations, datetime], None] | None = None,
    ) -> None:
        self.repository = repository
        self.serializer = serializer
        self.clock = clock
        self.listeners = listeners
        self.dead_after = dead_after
        self.delete_unresolved_after = delete_unresolved_after
        self._on_scheduled = on_scheduled
        #: told of each dead execution this instance handled (the execution history)
        self._on_handled = on_handled

    def run_once(self) -> None:
        now = self.clock.now()
        self.repository.record_unknown_due(now)
        self.delete_old_unresolved()
        for execution in self.repository.get_dead_executions(now - self.dead_after):
            task = self.repository.resolver.resolve(execution.task_name)
            if task is None:
                continue
            try:
                self.listeners.on_scheduler_event(SchedulerEventType.DEAD_EXECUTION)
                self.listeners.on_execution_dead(execution)
                complete = ExecutionComplete.failure(execution, now, now, None)
                ops = ExecutionOperations(self.repository, execution, self.serializer, self._on_scheduled)
                with self.repository.bounded_lock_wait(REVIVE_LOCK_WAIT):
                    task.dead_execution_handler.dead_execution(complete, ops)
                if self._on_handled is not None:
                    self._on_handled(execution, ops, now)
            except RowLockedError:
                log.warning(
                    "dead execution %s: its row is locked by another transaction (its owner may be "
                    "frozen in the middle of a write); looking again on the next pass",
                    execution,
                )
            except ExecutionError as lost:
                # Every instance detects the same dead row; one revives it, the others lose the
                # version check. That is the protocol working, not an error.
                log.info("dead execution %s was handled by another instance first (%s)", execution, lost)
            except Exception:
                log.exception("handling dead execution %s failed; will retry on the next run", execution)
                self.listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
        self.listeners.on_scheduler_event(SchedulerEventType.RAN_DETECT_DEAD)

    def delete_old_unresolved(self) -> None:
        now = self.clock.now()
        for name, first_seen in self.repository.resolver.unresolved().items():
            if now - first_seen > self.delete_unresolved_after:
                log.warning(
                    "deleting all executions of unknown task %r: unresolved for more than %s",
                    name,
                    self.delete_unresolved_after,
                )
                removed = self.repository.delete_unresolved(name)
                log.info("deleted %d execution(s) of unknown task %r", removed, name)
                self.repository.resolver.forget_unresolved(name)
