"""Claiming an execution straight from the notification that announced it (PostgreSQL).

When another process schedules one execution due now, its notification names it. Waking the
poller would cost a thread hand-off and, in fetch mode, a read of the due rows before the
claim; on an idle machine each round trip and each wake-up of a sleeping thread costs about a
millisecond. Instead, while a worker thread is free, the listener thread claims the named row
with one ``UPDATE … RETURNING`` on its own connection, and a worker runs it: one round trip and
one hand-off after the notification.

Every process listening hears the same notification and tries; under the row lock exactly one
claim wins, and the others change nothing. Polling stays the authority: whatever is not
claimed here (no free worker, paused, task unknown to this process, statements being watched,
an error) falls back to waking the poller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._context import SchedulerState
from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._liveness.outage import OutagePolicy
from ekbatan.distributed_jobs.scheduler._observability import (
    CandidateEventType,
    Listeners,
    SchedulerEventType,
)
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._polling.wakeups import NotificationListener, Wakeup
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRunner
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.driver_statements import driver_path_available
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.notified_claims")


@dataclass(frozen=True, slots=True)
class NotifiedClaims:
    """Claims of notified executions for this scheduler's free worker threads.

    Not used with priority ordering: a row claimed because it was announced would jump ahead of
    due rows of higher priority.
    """

    repository: TaskRepository
    runner: ExecutionRunner
    pool: WorkerPool
    clock: Clock
    state: SchedulerState
    listeners: Listeners
    claims: QueuedClaims

    def offer(self, wakeup: Wakeup, connection: Any) -> bool:
        """Claim the execution ``wakeup`` names on ``connection`` (the listener's) and queue it
        for a worker (or leave it, when its task is paused). False when this is not the moment — nothing named, not due yet, no free
        worker, paused, stopping, an unknown task, statements being watched, or the claim
        failed — and the caller should wake the poller instead."""
        key = wakeup.key
        if key is None or self.state.is_shutting_down or self.state.is_paused:
            return False
        now = self.clock.now()
        if wakeup.due > now or self.repository.resolver.resolve(key.task_name) is None:
            return False
        if key.task_name in self.repository.resolver.paused_names():
            return True  # it waits for its task's resumption; no poll would claim it either
        # Only for an idle thread: with work queued, the poller's order (oldest due first) rules.
        if self.pool.in_queue_or_processing >= self.pool.size or not self.repository.claims_notified:
            return False
        try:
            claimed = self.repository.claim_notified(key, now, connection)
        except Exception as exc:
            log.warning("claiming notified execution %s failed (%s: %s)", key, type(exc).__name__, exc)
            self._release(key, now)
            return False
        if claimed is None:
            log.debug("notified execution %s was claimed elsewhere, is held or is gone", key)
            self.listeners.on_candidate_event(CandidateEventType.ALREADY_PICKED)
            return True
        self.listeners.on_scheduler_event(SchedulerEventType.RAN_CLAIM_NOTIFIED)
        # Queued like a lock-and-fetch claim, so it heartbeats should a worker be slow to come.
        token = self.claims.add(claimed)
        if not self.pool.submit(self.claims.job(token, self.runner, self.listeners)):
            self.claims.take(token)
            self.repository.unpick([claimed])  # stopping: hand it back rather than leave it picked
        return True

    def _release(self, key: TaskInstanceId, claimed_at: datetime) -> None:
        """A claim whose statement failed may still have committed (the connection broke after
        the commit, before the reply): nobody would run or heartbeat that row until it counts as
        dead, so give it back; the poller then finds it."""
        try:
            if self.repository.release_notified(key, claimed_at):
                log.info("gave back notified execution %s, claimed before the connection broke", key)
        except Exception as exc:
            log.warning(
                "could not give back a possible claim of %s (%s: %s); if it landed, it is revived "
                "once its heartbeat counts as dead",
                key,
                type(exc).__name__,
                exc,
            )


def start_listening(
    repository: TaskRepository,
    name: str,
    on_wakeup: Callable[[Wakeup, Any], None],
    outage: OutagePolicy,
    notified_claims: NotifiedClaims | None,
) -> tuple[NotificationListener | None, NotifiedClaims | None]:
    """The listener of the table's notification channel, started, and what claims the
    executions notifications name (None when not wanted); (None, None) where there is no
    channel (not PostgreSQL) or no psycopg 3 driver to listen with."""
    channel = repository.notify_channel
    if channel is None:
        return None, None
    if not driver_path_available(repository.engine):
        log.info(
            "scheduler %s: listening for notifications needs the psycopg (3) driver, not %s; "
            "other processes' schedules are found by polling",
            name,
            repository.engine.dialect.driver,
        )
        return None, None
    listener = NotificationListener(repository.engine, channel, on_wakeup, outage=outage)
    listener.start()
    return listener, notified_claims
