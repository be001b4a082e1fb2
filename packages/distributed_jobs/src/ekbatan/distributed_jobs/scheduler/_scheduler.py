"""The scheduler: a poller, a heartbeat loop, a dead-execution loop and a worker pool around
one ``scheduled_tasks`` table. Several processes (or machines) may run one each against the
same table; the versioned claim lets exactly one of them run each due execution.
"""

from __future__ import annotations

import atexit
import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._assembly import SchedulerParts
from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._liveness.background import RepeatingLoop, liveness_loops
from ekbatan.distributed_jobs.scheduler._liveness.outage import check_connection
from ekbatan.distributed_jobs.scheduler._observability import SchedulerEventType
from ekbatan.distributed_jobs.scheduler._polling.notified_claims import NotifiedClaims, start_listening
from ekbatan.distributed_jobs.scheduler._polling.poller import PollLoop, run_due_here
from ekbatan.distributed_jobs.scheduler._polling.strategy_choice import polling_strategy
from ekbatan.distributed_jobs.scheduler._polling.wakeups import NotificationListener, Wakeup
from ekbatan.distributed_jobs.scheduler._running.shutdown import drain_workers
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._builder import SchedulerBuilder

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.scheduler")

P = ParamSpec("P")
R = TypeVar("R")


def _client_call(
    method: Callable[Concatenate[SchedulerClient, P], R],
) -> Callable[Concatenate[Scheduler, P], R]:
    """``method`` of :class:`SchedulerClient`, called on the scheduler's :attr:`Scheduler.client`
    (with its signature and documentation)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: Scheduler, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = getattr(self.client, name)(*args, **kwargs)
        return result

    return call


class Scheduler:
    """Create with :meth:`create`; see :class:`SchedulerBuilder` for the options.

    It schedules, lists and controls executions through its :attr:`client` (every
    :class:`SchedulerClient` call is also a call of the scheduler's own), and runs them."""

    @staticmethod
    def create(engine: sa.Engine, *tasks: Task[Any]) -> SchedulerBuilder:
        from ekbatan.distributed_jobs.scheduler._builder import (
            SchedulerBuilder,  # the builder builds schedulers
        )

        return SchedulerBuilder(engine, tasks)

    def __init__(self, parts: SchedulerParts) -> None:
        options = self.options = parts.options
        self.name = parts.name
        self.threads = options.threads
        self.polling_interval = options.polling_interval
        self.heartbeat_interval = options.heartbeat_interval
        self.missed_heartbeats_limit = options.missed_heartbeats_limit
        self.shutdown_max_wait = options.shutdown_max_wait
        self.outage = options.outage
        self.clock = options.clock
        self.serializer = options.serializer
        #: schedules, reschedules, cancels, lists and controls executions in this scheduler's table
        self.client: SchedulerClient = parts.client
        self._state = parts.state
        self._wakeups = parts.wakeups
        self.waiter = parts.wakeups.waiter
        self.execution_history = parts.history
        self.telemetry = parts.telemetry
        self.metrics = parts.metrics
        self.listeners = parts.listeners
        self._startup = parts.startup
        self.pauses = parts.pauses
        self.registry = parts.registry
        self.completion_batcher = parts.completion_batcher
        self.async_runner = parts.async_runner
        self.runner = parts.runner
        self.queued_claims = parts.queued_claims
        self.heartbeats = parts.heartbeats
        self.dead_executions = parts.dead_executions
        self.lower_limit, self.upper_limit = options.strategy.limits(self.threads)
        self.strategy_config = options.strategy
        self._pool: WorkerPool | None = None
        self._poller: PollLoop | None = None
        self._heartbeat_loop: RepeatingLoop | None = None
        self._dead_loop: RepeatingLoop | None = None
        self._listener: NotificationListener | None = None
        self._notified_claims: NotifiedClaims | None = None
        self._atexit_registered = False

    # ------------------------------------------------------------------ the client's calls
    @property
    def repository(self) -> TaskRepository:
        return self.client.repository

    @property
    def table_name(self) -> str:
        return self.client.table_name

    @property
    def notifies(self) -> bool:
        return self.client.notifies

    watch_changes = _client_call(SchedulerClient.watch_changes)
    schedule = _client_call(SchedulerClient.schedule)
    schedule_if_not_exists = _client_call(SchedulerClient.schedule_if_not_exists)
    schedule_batch = _client_call(SchedulerClient.schedule_batch)
    reschedule = _client_call(SchedulerClient.reschedule)
    cancel = _client_call(SchedulerClient.cancel)
    get_scheduled_execution = _client_call(SchedulerClient.get_scheduled_execution)
    get_scheduled_executions = _client_call(SchedulerClient.get_scheduled_executions)
    get_scheduled_executions_for_task = _client_call(SchedulerClient.get_scheduled_executions_for_task)
    get_scheduled_executions_summary_by_task = _client_call(
        SchedulerClient.get_scheduled_executions_summary_by_task
    )
    claims_by_node = _client_call(SchedulerClient.claims_by_node)
    pause_task = _client_call(SchedulerClient.pause_task)
    pause_execution = _client_call(SchedulerClient.pause_execution)
    resume_task = _client_call(SchedulerClient.resume_task)
    resume_execution = _client_call(SchedulerClient.resume_execution)
    paused_tasks = _client_call(SchedulerClient.paused_tasks)
    retry_dead = _client_call(SchedulerClient.retry_dead)
    cancel_held = _client_call(SchedulerClient.cancel_held)
    get_held_executions = _client_call(SchedulerClient.get_held_executions)
    get_held_execution = _client_call(SchedulerClient.get_held_execution)
    count_held = _client_call(SchedulerClient.count_held)
    history = _client_call(SchedulerClient.history)
    history_summary = _client_call(SchedulerClient.history_summary)

    # ------------------------------------------------------------------ state
    @property
    def is_started(self) -> bool:
        return self._state.is_started

    @property
    def is_shutting_down(self) -> bool:
        return self._state.is_shutting_down

    @property
    def is_paused(self) -> bool:
        return self._state.is_paused

    @property
    def last_successful_poll(self) -> datetime | None:
        """When the poller last completed a poll without an error, by the scheduler's clock
        (None before the first one): a health check's measure of a working poller."""
        return None if self._poller is None else self._poller.last_successful_poll

    @property
    def task_names(self) -> tuple[str, ...]:
        """The names of the tasks this scheduler runs."""
        return tuple(self.repository.resolver.tasks)

    @property
    def unresolved_task_names(self) -> tuple[str, ...]:
        """Task names met in due rows that no task of this scheduler has (each also logged once
        at WARNING); their rows wait for an instance that knows them."""
        return self.repository.resolver.unresolved_names()

    @property
    def scheduler_state(self) -> Scheduler:
        return self

    @property
    def paused_task_names(self) -> frozenset[str]:
        """Task names paused cluster-wide (``pause_task``), as this scheduler last read them."""
        return self.repository.resolver.paused_names()

    def pause(self) -> None:
        """Stop this process's polling; running executions, heartbeats and dead detection go
        on. Only this process: ``pause_task(name)`` pauses a task on every node. A poll already
        under way when this is called is not waited for: it finishes, and what it claimed runs."""
        if not self._state.is_paused:
            self._state.is_paused = True
            log.info("scheduler %s paused polling", self.name)

    def resume(self) -> None:
        if self._state.is_paused:
            self._state.is_paused = False
            log.info("scheduler %s resumed polling", self.name)
            self.trigger_check_for_due_executions()

    def trigger_check_for_due_executions(self) -> None:
        self.waiter.wake_or_skip_next_wait()

    def get_currently_executing(self) -> list[CurrentlyExecuting]:
        return self.registry.snapshot()

    def get_currently_executing_with_stale_heartbeat(self) -> list[CurrentlyExecuting]:
        return [c for c in self.registry.snapshot() if c.heartbeat_state.has_stale_heartbeat]

    def get_failing_executions(self, failing_longer_than: timedelta) -> list[Execution]:
        return self.repository.get_executions_failing_longer_than(self.clock.now() - failing_longer_than)

    # ------------------------------------------------------------------ wake-ups
    def _before_poll(self) -> None:
        self._startup.retry()
        self.pauses.refresh()

    def _on_notification(self, wakeup: Wakeup, connection: Any) -> None:
        """Someone scheduled something (claim it for a free worker, or wake the poller), or
        paused or resumed a task (read the pauses, then poll)."""
        if wakeup.pauses_changed:
            self.pauses.invalidate()
        claims = self._notified_claims
        # A claim here trusts the paused names this process holds; after a pause's notification
        # they may be out of date until the poller has read them again, so the poller claims.
        if claims is not None and self.pauses.is_current and claims.offer(wakeup, connection):
            return
        self._wakeups.due_at(wakeup.due)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._state.lock:
            if self._state.is_started:
                log.warning("scheduler %s is already started", self.name)
                return
            if self._state.is_shutting_down:
                raise RuntimeError(f"scheduler {self.name} was stopped; build a new one to start again")
            self._state.is_started = True
        try:
            self._start()
        except BaseException:
            # nothing of a failed start may go on running: stop what did start
            self.stop()
            raise

    def check_database(self) -> None:
        """Connect once through the engine, with a bounded connect timeout, and raise what the
        driver raised: a wrong password, an unknown database or an unreachable host fails here,
        before any thread runs. ``start()`` does not call it; the scheduler's loops retry on
        their own while the database is down."""
        check_connection(self.repository.engine)

    @property
    def startup_tasks_pending(self) -> list[str]:
        """Names of start-up tasks not scheduled yet because their ``on_startup`` failed (the
        database was down at start); the poller retries them."""
        return self._startup.pending

    @property
    def startup_tasks_waiting_for_database(self) -> list[str]:
        """The :attr:`startup_tasks_pending` whose last try failed on the database. A start-up
        task failing for another reason (its data does not serialize, its row is executing
        with another schedule) is retried too, but is not a database outage to wait for."""
        return self._startup.waiting_for_database

    def _start(self) -> None:
        log.info(
            "starting scheduler %s: threads=%d, polling=%s (%s, limits %d/%d), heartbeat=%s x %d, "
            "immediate=%s, priority=%s, table=%s, dialect=%s",
            self.name,
            self.threads,
            self.polling_interval,
            self.strategy_config.kind,
            self.lower_limit,
            self.upper_limit,
            self.heartbeat_interval,
            self.missed_heartbeats_limit,
            self.options.immediate_execution,
            self.options.priority,
            self.repository.table_name,
            self.repository.dialect.name,
        )
        self.repository.detect_columns_if_reachable(f"scheduler {self.name}")
        self.run_startup_tasks()
        if self.completion_batcher is not None:
            self.completion_batcher.start()
        if history := self.execution_history:
            history.start()
        self._pool = WorkerPool(self.threads, name=f"ekbatan-worker-{self.name}")
        self._poller = PollLoop(
            polling_strategy(
                self.strategy_config,
                repository=self.repository,
                runner=self.runner,
                pool=self._pool,
                clock=self.clock,
                state=self,
                listeners=self.listeners,
                limits=(self.lower_limit, self.upper_limit),
                threads=self.threads,
                trigger=self.trigger_check_for_due_executions,
                claims=self.queued_claims,
                priority=self.options.priority,
            ),
            self.repository,
            self.clock,
            self,
            self.listeners,
            self.polling_interval,
            self.waiter,
            before_poll=self._before_poll,
            outage=self.outage,
        )
        self._wakeups.poller = self._poller
        self._poller.start()
        self._start_listening()
        self._heartbeat_loop, self._dead_loop = liveness_loops(
            self.heartbeats.run_once,
            self.dead_executions.run_once,
            self.heartbeat_interval,
            lambda _exc: self.listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR),
            self.outage,
        )
        if self.options.shutdown_hook and not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True

    def _start_listening(self) -> None:
        """On PostgreSQL, hear other processes' schedules: claim what they name, or wake the poller."""
        assert self._pool is not None
        claims = NotifiedClaims(
            self.repository, self.runner, self._pool, self.clock, self, self.listeners, self.queued_claims
        )
        claim_named = self.options.immediate_execution and not self.options.priority
        self._listener, self._notified_claims = start_listening(
            self.repository, self.name, self._on_notification, self.outage, claims if claim_named else None
        )

    def run_startup_tasks(self) -> None:
        """Run ``on_startup`` of each start-up task not yet done; a failing one stays pending."""
        self._startup.run()

    def stop(self, *, poller_wait: float = 5.0) -> None:
        """Stop polling, let running executions finish (two phases of ``shutdown_max_wait``),
        then stop heartbeats. An execution still running after that is abandoned: its row
        stays picked and another instance revives it once its heartbeat is old enough."""
        with self._state.lock:
            if self._state.is_shutting_down:
                # a second stop(), or one after a failed start() cleaned up, is harmless
                log.info("scheduler %s is already stopped or stopping", self.name)
                return
            self._state.is_shutting_down = True
        if self.telemetry is not None:
            self.telemetry.stop()  # a stopping scheduler is no longer scraped
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False
        if not self._state.is_started:
            self.async_runner.stop()  # a manually driven scheduler may have run async handlers
            self.runner.deadlines.stop()
            return
        log.info("stopping scheduler %s", self.name)
        self.waiter.wake_or_skip_next_wait()
        if self._listener is not None:
            self._listener.stop()
        if self._poller is not None and not self._poller.join(poller_wait):
            log.warning("the poller of %s did not stop within %.1fs", self.name, poller_wait)
        started = time.monotonic()
        if self._pool is not None:
            drain_workers(
                self._pool,
                self.queued_claims,
                self.repository,
                self.async_runner,
                self.registry,
                self.shutdown_max_wait.total_seconds(),
                self.name,
            )
        if self.completion_batcher is not None:
            self.completion_batcher.stop()  # what finished is written before heartbeats stop
        waited = time.monotonic() - started
        if self.shutdown_max_wait > timedelta(minutes=1) and waited >= self.shutdown_max_wait.total_seconds():
            log.info("shutdown waited %.0fs; lower shutdown_max_wait to stop faster", waited)
        for loop in (self._heartbeat_loop, self._dead_loop):
            if loop is not None:
                loop.stop()
        self.async_runner.stop()
        self.runner.deadlines.stop()
        if self.execution_history is not None:
            self.execution_history.stop()  # after the workers: their runs' rows are written
        self._state.is_started = False
        log.info("scheduler %s stopped", self.name)

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ driving by hand
    def run_any_due_executions(self) -> int:
        """Fetch, claim and run due executions on the calling thread (tests, manual drivers);
        how many this call executed."""
        self.pauses.refresh(now=True)
        return run_due_here(self.repository, self.runner, self.clock, max(self.upper_limit, 1))

    def run_dead_execution_detection(self) -> None:
        self.dead_executions.run_once()

    def run_heartbeats(self) -> None:
        self.heartbeats.run_once()

    def __repr__(self) -> str:
        return f"Scheduler(name={self.name!r}, started={self._state.is_started}, table={self.repository.table_name!r})"
