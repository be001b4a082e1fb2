"""Which polling strategy a scheduler runs, built from its options: lock-and-fetch or fetch
when asked for, else the default ``auto`` (sized lock-and-fetch where the server has
``SKIP LOCKED``, fetch elsewhere; without claim sizing when priorities are on)."""

from __future__ import annotations

from collections.abc import Callable

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._context import SchedulerState
from ekbatan.distributed_jobs.scheduler._observability import Listeners
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._polling.contention import ClaimContention
from ekbatan.distributed_jobs.scheduler._polling.poller import (
    AutoStrategy,
    FetchStrategy,
    LockAndFetchStrategy,
)
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import (
    ClaimSizing,
    PollingKind,
    PollingStrategyConfig,
)
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRunner
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository


def polling_strategy(
    config: PollingStrategyConfig,
    *,
    repository: TaskRepository,
    runner: ExecutionRunner,
    pool: WorkerPool,
    clock: Clock,
    state: SchedulerState,
    listeners: Listeners,
    limits: tuple[int, int],
    threads: int,
    trigger: Callable[[], None],
    claims: QueuedClaims,
    priority: bool,
) -> FetchStrategy | LockAndFetchStrategy | AutoStrategy:
    lower_limit, upper_limit = limits

    def lock_and_fetch(sizing: ClaimSizing | None = None) -> LockAndFetchStrategy:
        return LockAndFetchStrategy(
            repository, runner, pool, clock, listeners, lower_limit, upper_limit, trigger, claims, sizing
        )

    def fetch(lower: int = lower_limit, upper: int = upper_limit) -> FetchStrategy:
        return FetchStrategy(
            repository,
            runner,
            pool,
            clock,
            state,
            listeners,
            lower,
            upper,
            trigger,
            # Sampling reorders rows across instances, which a priority order must not suffer.
            ClaimContention(enabled=not priority),
        )

    if config.kind is PollingKind.LOCK_AND_FETCH:
        return lock_and_fetch()
    if config.kind is PollingKind.FETCH:
        return fetch()
    # With priorities, nothing is claimed beyond the free threads: a higher priority falling
    # due must not wait behind claimed lower ones in the local queue.
    sizing = None if priority else ClaimSizing(threads)
    return AutoStrategy(
        repository,
        lambda: lock_and_fetch(sizing),
        lambda: fetch(*PollingStrategyConfig.fetch().limits(threads)),
    )
