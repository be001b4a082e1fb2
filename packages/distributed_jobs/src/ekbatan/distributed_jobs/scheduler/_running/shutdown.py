"""Draining the worker pool at shutdown: claimed rows no worker has started are given back,
running executions get ``shutdown_max_wait`` to finish, then queued ones are dropped and async
ones cancelled for a second wait, and whatever still runs is abandoned (its row stays picked
and is revived elsewhere as a dead execution)."""

from __future__ import annotations

import logging

from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRegistry
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository

# the scheduler's own logger: these lines are part of its stop
log = logging.getLogger("ekbatan.distributed_jobs.scheduler.scheduler")


def drain_workers(
    pool: WorkerPool,
    claims: QueuedClaims,
    repository: TaskRepository,
    async_runner: AsyncRunner,
    registry: ExecutionRegistry,
    max_wait: float,
    name: str,
) -> None:
    pool.stop_accepting()
    give_back_queued_claims(claims, repository, name)
    if not pool.wait_idle(max_wait):
        log.warning(
            "executions still running after %.1fs; cancelling queued ones and interrupting async "
            "ones, then waiting up to %.1fs more",
            max_wait,
            max_wait,
        )
        dropped = pool.discard_queued()
        cancelled = async_runner.cancel_all()
        log.info("dropped %d queued and cancelled %d async execution(s)", dropped, cancelled)
        if not pool.wait_idle(max_wait):
            still = ", ".join(str(c.execution) for c in registry.snapshot())
            log.warning(
                "abandoning executions still running: %s; their rows stay picked and will be revived "
                "as dead executions",
                still or "(none registered)",
            )
    pool.close()


def give_back_queued_claims(claims: QueuedClaims, repository: TaskRepository, name: str) -> None:
    """Claimed rows no worker has started: unpicked (at their version) for any instance to
    run, instead of run while the process stops or left picked until found dead."""
    released = claims.release_all()
    if released:
        given_back = repository.unpick(released)
        log.info(
            "scheduler %s gave back %d of %d claimed execution(s) it had not started",
            name,
            given_back,
            len(released),
        )
