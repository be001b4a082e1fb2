"""Heartbeats: refresh ``last_heartbeat`` of every execution running in this process.

Written by a housekeeping thread, never by the worker, so a long handler is not itself at
risk; guarded by the version the execution was claimed at, and never bumping it, so the
owner's own completion still matches. A failed heartbeat does not stop the handler; it
marks its heartbeat state stale, which the handler can watch.
"""

from __future__ import annotations

import logging

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    DEFAULT_OUTAGE_POLICY,
    FailureLog,
    OutagePolicy,
)
from ekbatan.distributed_jobs.scheduler._observability import Listeners, SchedulerEventType
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRegistry
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.heartbeat")

ATTEMPTS = 3


class HeartbeatUpdater:
    def __init__(
        self,
        repository: TaskRepository,
        registry: ExecutionRegistry,
        clock: Clock,
        listeners: Listeners,
        claims: QueuedClaims | None = None,
        outage: OutagePolicy = DEFAULT_OUTAGE_POLICY,
        completions: CompletionBatcher | None = None,
    ) -> None:
        self.repository = repository
        self.registry = registry
        self.clock = clock
        self.listeners = listeners
        self.claims = claims
        #: finished executions whose delete is still to commit: their rows are still picked
        self.completions = completions
        self.failures = FailureLog("updating heartbeats", log, policy=outage)

    def run_once(self) -> None:
        queued = self.claims.snapshot() if self.claims is not None else []
        running = self.registry.snapshot()
        for token, execution in queued:
            self._beat_queued(token, execution)
        for execution in self.completions.pending() if self.completions is not None else ():
            self._beat_finishing(execution)
        if not running:
            return
        for currently in running:
            self._beat(currently)
        self.listeners.on_scheduler_event(SchedulerEventType.RAN_UPDATE_HEARTBEATS)

    def _beat_queued(self, token: int, execution: Execution) -> None:
        try:
            alive = self.repository.update_heartbeat(execution, self.clock.now())
        except Exception as exc:
            self.failures.failed(exc)
            return
        self.failures.succeeded()
        if not alive and self.claims is not None:  # only queued claims are beaten here
            self.claims.mark_lost(token)

    def _beat_finishing(self, execution: Execution) -> None:
        # No row updated means the delete committed meanwhile: nothing to report.
        try:
            self.repository.update_heartbeat(execution, self.clock.now())
        except Exception as exc:
            self.failures.failed(exc)
            return
        self.failures.succeeded()

    def _beat(self, currently: CurrentlyExecuting) -> None:
        execution = currently.execution
        now = self.clock.now()
        try:
            ok = self._update_with_retries(currently)
        except Exception as exc:
            self.failures.failed(exc)
            # still a failed heartbeat (db-scheduler: false after the last retry), so the job
            # sees it in failed_heartbeats / has_stale_heartbeat
            currently.heartbeat_state.failed(now)
            self.listeners.on_scheduler_event(SchedulerEventType.FAILED_HEARTBEAT)
            self.listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
            self.listeners.on_execution_failed_heartbeat(currently)
            return
        self.failures.succeeded()
        if ok:
            currently.heartbeat_state.success(now)
            return
        failures = currently.heartbeat_state.failed(now)
        log.info("heartbeat of %s updated no row (completed meanwhile, or taken over)", execution)
        self.listeners.on_scheduler_event(SchedulerEventType.FAILED_HEARTBEAT)
        self.listeners.on_execution_failed_heartbeat(currently)
        if failures > 1:
            log.warning(
                "execution %s has failed %d heartbeats in a row (fraction dead %.2f); it may be revived "
                "by another instance",
                execution,
                failures,
                currently.heartbeat_state.fraction_dead,
            )
            self.listeners.on_scheduler_event(SchedulerEventType.FAILED_MULTIPLE_HEARTBEATS)

    def _update_with_retries(self, currently: CurrentlyExecuting) -> bool:
        # Retry only when the statement raises; zero rows is an answer, not an accident.
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self.repository.update_heartbeat(currently.execution, self.clock.now())
            except Exception:
                if attempt == ATTEMPTS:
                    raise
                log.debug("heartbeat attempt %d of %s raised; retrying", attempt, currently.execution)
        return False
