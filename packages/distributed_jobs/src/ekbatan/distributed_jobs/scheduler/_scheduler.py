"""The scheduler: a poller, a heartbeat loop, a dead-execution loop and a worker pool around
one ``scheduled_tasks`` table. Several processes (or machines) may run one each against the
same table; the versioned claim lets exactly one of them run each due execution.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._builder import (
    SchedulerBuilder,
    SchedulerOptions,
    default_scheduler_name,
)
from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting
from ekbatan.distributed_jobs.scheduler._execution import Execution, TaskInstanceId
from ekbatan.distributed_jobs.scheduler._history.recorder import ExecutionHistory
from ekbatan.distributed_jobs.scheduler._liveness.background import RepeatingLoop, liveness_loops
from ekbatan.distributed_jobs.scheduler._liveness.dead_executions import DeadExecutionDetector
from ekbatan.distributed_jobs.scheduler._liveness.heartbeat import HeartbeatUpdater
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    check_connection,
)
from ekbatan.distributed_jobs.scheduler._observability import (
    Listeners,
    SchedulerEventType,
    each_of,
)
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._polling.notified_claims import NotifiedClaims, start_listening
from ekbatan.distributed_jobs.scheduler._polling.pause_watch import PauseWatch
from ekbatan.distributed_jobs.scheduler._polling.poller import (
    PollLoop,
    run_due_here,
)
from ekbatan.distributed_jobs.scheduler._polling.strategy_choice import polling_strategy
from ekbatan.distributed_jobs.scheduler._polling.waiter import Waiter
from ekbatan.distributed_jobs.scheduler._polling.wakeups import NotificationListener, Wakeup, channel_for
from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRegistry, ExecutionRunner
from ekbatan.distributed_jobs.scheduler._running.shutdown import drain_workers
from ekbatan.distributed_jobs.scheduler._running.worker_pool import WorkerPool
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.session_setup import install_session_setup
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._tasks.startup import StartupTasks
from ekbatan.distributed_jobs.scheduler._telemetry.wiring import SchedulerTelemetry
from ekbatan.distributed_jobs.scheduler.dialects import SqlDialect

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.scheduler")


class Scheduler(SchedulerClient):
    """Create with :meth:`create`; see :class:`SchedulerBuilder` for the options."""

    @staticmethod
    # a different signature on purpose: a scheduler is built with options, a client is not
    def create(engine: sa.Engine, *tasks: Task[Any]) -> SchedulerBuilder:  # type: ignore[override]
        return SchedulerBuilder(engine, tasks)

    def __init__(self, options: SchedulerOptions, tasks: list[Task[Any]], dialect: SqlDialect) -> None:
        self.options = options
        self.name = options.name or default_scheduler_name()
        self.threads = options.threads
        self.polling_interval = options.polling_interval
        self.heartbeat_interval = options.heartbeat_interval
        self.missed_heartbeats_limit = options.missed_heartbeats_limit
        self.shutdown_max_wait = options.shutdown_max_wait
        self.outage = options.outage
        self._state_lock = threading.Lock()
        self._started = False
        self._shutting_down = False
        self._paused = False

        history = self.execution_history = (
            ExecutionHistory(options.history, options.clock) if options.history else None
        )
        extra = () if history is None else (history.prune_task,)
        telemetry = self.telemetry = (
            None
            if options.telemetry is None
            else SchedulerTelemetry(
                options.telemetry, options.engine, dialect, options.table_name, options.clock
            )
        )
        self.metrics = None if telemetry is None else telemetry.metrics
        interceptors = options.interceptors
        if telemetry is not None and telemetry.interceptor is not None:
            interceptors = (telemetry.interceptor, *interceptors)  # outermost
        self.listeners = Listeners(
            options.listeners
            + (() if history is None else (history,))
            + (() if self.metrics is None else (self.metrics,))
        )
        resolver = TaskResolver(
            [*tasks, *extra],
            on_unresolved=lambda _name: self.listeners.on_scheduler_event(SchedulerEventType.UNRESOLVED_TASK),
        )
        install_session_setup(options.engine, dialect)
        repository = TaskRepository(
            options.engine,
            dialect,
            resolver,
            table_name=options.table_name,
            picked_by=self.name,
            priority_enabled=options.priority,
            notify_channel=channel_for(options.table_name) if options.listen_notify else None,
        )
        if history is not None:
            history.bind(repository)
        super().__init__(
            options.engine,
            serializer=options.serializer,
            clock=options.clock,
            _repository=repository,
            _on_scheduled=self._on_execution_scheduled,
        )
        if telemetry is not None:
            self._schedule_tracing = telemetry.bind(repository, self.clock)
        # Startup scheduling writes without listeners: no immediate-execution hints before
        # the poller even runs.
        self._startup = StartupTasks(
            options.startup_tasks + extra,
            SchedulerClient(
                options.engine, serializer=options.serializer, clock=options.clock, _repository=repository
            ),
            self.clock,
            self.listeners,
            self.outage,
        )
        self.waiter = Waiter()
        self.pauses = PauseWatch(repository, self.polling_interval)
        self.registry = ExecutionRegistry()
        self.completion_batcher = CompletionBatcher(repository) if options.batch_completions else None
        self.async_runner = AsyncRunner()
        self.runner = ExecutionRunner(
            repository=repository,
            serializer=self.serializer,
            clock=self.clock,
            listeners=self.listeners,
            interceptors=interceptors,
            registry=self.registry,
            state=self,
            client_factory=lambda: self,
            heartbeat_interval=self.heartbeat_interval,
            missed_heartbeats_limit=self.missed_heartbeats_limit,
            on_scheduled=self._on_execution_scheduled,
            async_runner=self.async_runner,
            failure_log_level=options.failure_log_level,
            failure_log_stack_trace=options.failure_log_stack_trace,
            writer=self.completion_batcher,
            outage=self.outage,
        )
        self.queued_claims = QueuedClaims()
        self.heartbeats = HeartbeatUpdater(
            repository,
            self.registry,
            self.clock,
            self.listeners,
            self.queued_claims,
            outage=self.outage,
            completions=self.completion_batcher,
        )
        self.dead_executions = DeadExecutionDetector(
            repository,
            self.serializer,
            self.clock,
            self.listeners,
            self.heartbeat_interval * self.missed_heartbeats_limit,
            options.delete_unresolved_after,
            on_scheduled=lambda name, instance_id, when: self._on_execution_scheduled(
                TaskInstanceId(name, instance_id), when
            ),
            on_handled=each_of(
                None if history is None else history.dead_execution_handled,
                None if self.metrics is None else self.metrics.dead_execution_handled,
            ),
        )
        self.lower_limit, self.upper_limit = options.strategy.limits(self.threads)
        self.strategy_config = options.strategy
        self._pool: WorkerPool | None = None
        self._poller: PollLoop | None = None
        self._heartbeat_loop: RepeatingLoop | None = None
        self._dead_loop: RepeatingLoop | None = None
        self._listener: NotificationListener | None = None
        self._notified_claims: NotifiedClaims | None = None
        self._atexit_registered = False

    # ------------------------------------------------------------------ state
    @property
    def is_started(self) -> bool:
        return self._started

    @property
    def is_shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def is_paused(self) -> bool:
        return self._paused

    @property
    def last_successful_poll(self) -> datetime | None:
        """When the poller last completed a poll without an error, by the scheduler's clock
        (None before the first one): a health check's measure of a working poller."""
        return None if self._poller is None else self._poller.last_successful_poll

    @property
    def task_names(self) -> tuple[str, ...]:
        """The names of the tasks this scheduler runs."""
        return tuple(self._repository.resolver.tasks)

    @property
    def unresolved_task_names(self) -> tuple[str, ...]:
        """Task names met in due rows that no task of this scheduler has (each also logged once
        at WARNING); their rows wait for an instance that knows them."""
        return self._repository.resolver.unresolved_names()

    @property
    def scheduler_state(self) -> Scheduler:
        return self

    @property
    def paused_task_names(self) -> frozenset[str]:
        """Task names paused cluster-wide (``pause_task``), as this scheduler last read them."""
        return self._repository.resolver.paused_names()

    def pause(self) -> None:
        """Stop this process's polling; running executions, heartbeats and dead detection go
        on. Only this process: ``pause_task(name)`` pauses a task on every node. A poll already
        under way when this is called is not waited for: it finishes, and what it claimed runs."""
        if not self._paused:
            self._paused = True
            log.info("scheduler %s paused polling", self.name)

    def resume(self) -> None:
        if self._paused:
            self._paused = False
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
    def _on_execution_scheduled(
        self, key: TaskInstanceId, execution_time: datetime, *, committing: bool = False
    ) -> None:
        self.listeners.on_execution_scheduled(key, execution_time)
        # ``committing``: told from inside the caller's commit, which has not landed yet;
        # poll a moment later rather than into a transaction still in flight.
        self._due_at(execution_time, margin=0.01 if committing else 0.0)

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
        self._due_at(wakeup.due)

    def _due_at(self, execution_time: datetime, margin: float = 0.0) -> None:
        """Something becomes due at ``execution_time``: poll then, not a whole interval later."""
        if not self._started or self._shutting_down:
            return
        delay = (execution_time - self.clock.now()).total_seconds()
        if delay <= 0:
            if not self.options.immediate_execution:
                return
            if margin <= 0:
                self.waiter.wake_or_skip_next_wait()
                return
            if self._poller is not None:
                self._poller.recheck_soon()  # the commit may land only after the first poll
        if delay >= self.polling_interval.total_seconds():
            return
        # A local timer for the earliest due time we know of, instead of a whole interval. For a
        # future due time it rings a little early (the poller claims then, due time included).
        if delay > margin and self._poller is not None:
            self.waiter.wake_by(self._poller.announce(execution_time))
        else:
            self.waiter.wake_by(max(delay, margin))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._state_lock:
            if self._started:
                log.warning("scheduler %s is already started", self.name)
                return
            if self._shutting_down:
                raise RuntimeError(f"scheduler {self.name} was stopped; build a new one to start again")
            self._started = True
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
        with self._state_lock:
            if self._shutting_down:
                # a second stop(), or one after a failed start() cleaned up, is harmless
                log.info("scheduler %s is already stopped or stopping", self.name)
                return
            self._shutting_down = True
        if self.telemetry is not None:
            self.telemetry.stop()  # a stopping scheduler is no longer scraped
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False
        if not self._started:
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
        self._started = False
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
        return f"Scheduler(name={self.name!r}, started={self._started}, table={self.repository.table_name!r})"
