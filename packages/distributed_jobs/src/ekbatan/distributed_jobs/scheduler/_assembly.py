"""The parts of a scheduler, built from its options before the scheduler exists: the table's
repository and a client on it, the listeners, the runner, the heartbeat and dead-execution
work, and the two small objects every part may consult — the run state and the due-time
wake-ups — so that no part needs the scheduler itself."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._history.recorder import ExecutionHistory
from ekbatan.distributed_jobs.scheduler._liveness.dead_executions import DeadExecutionDetector
from ekbatan.distributed_jobs.scheduler._liveness.heartbeat import HeartbeatUpdater
from ekbatan.distributed_jobs.scheduler._observability import Listeners, SchedulerEventType, each_of
from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims
from ekbatan.distributed_jobs.scheduler._polling.pause_watch import PauseWatch
from ekbatan.distributed_jobs.scheduler._polling.waiter import Waiter
from ekbatan.distributed_jobs.scheduler._polling.wakeups import channel_for
from ekbatan.distributed_jobs.scheduler._running.async_runner import AsyncRunner
from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher
from ekbatan.distributed_jobs.scheduler._running.runner import ExecutionRegistry, ExecutionRunner
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.session_setup import install_session_setup
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler._tasks.startup import StartupTasks
from ekbatan.distributed_jobs.scheduler._telemetry.wiring import SchedulerTelemetry

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._options import SchedulerOptions
    from ekbatan.distributed_jobs.scheduler._polling.poller import PollLoop
    from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
    from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics
    from ekbatan.distributed_jobs.scheduler.dialects import SqlDialect


@dataclass
class RunState:
    """Started, stopping, paused: what the runner, the loops and a handler's context ask (the
    ``SchedulerState`` they are given)."""

    is_started: bool = False
    is_shutting_down: bool = False
    is_paused: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class DueWakeups:
    """Polls when something becomes due rather than a whole polling interval later: told of
    each execution scheduled from this process, and of the due times other processes announce."""

    def __init__(self, options: SchedulerOptions, state: RunState, listeners: Listeners) -> None:
        self._options = options
        self._state = state
        self._listeners = listeners
        self._clock = options.clock
        self.waiter = Waiter()
        #: set while the scheduler runs: it may re-check soon and announces future due times
        self.poller: PollLoop | None = None

    def execution_scheduled(
        self, key: TaskInstanceId, execution_time: datetime, *, committing: bool = False
    ) -> None:
        self._listeners.on_execution_scheduled(key, execution_time)
        # ``committing``: told from inside the caller's commit, which has not landed yet;
        # poll a moment later rather than into a transaction still in flight.
        self.due_at(execution_time, margin=0.01 if committing else 0.0)

    def due_at(self, execution_time: datetime, margin: float = 0.0) -> None:
        """Something becomes due at ``execution_time``: poll then, not a whole interval later."""
        if not self._state.is_started or self._state.is_shutting_down:
            return
        delay = (execution_time - self._clock.now()).total_seconds()
        if delay <= 0:
            if not self._options.immediate_execution:
                return
            if margin <= 0:
                self.waiter.wake_or_skip_next_wait()
                return
            if self.poller is not None:
                self.poller.recheck_soon()  # the commit may land only after the first poll
        if delay >= self._options.polling_interval.total_seconds():
            return
        # A local timer for the earliest due time we know of, instead of a whole interval. For a
        # future due time it rings a little early (the poller claims then, due time included).
        if delay > margin and self.poller is not None:
            self.waiter.wake_by(self.poller.announce(execution_time))
        else:
            self.waiter.wake_by(max(delay, margin))


@dataclass
class SchedulerParts:
    """Everything a :class:`Scheduler` runs, built by :func:`assemble`."""

    options: SchedulerOptions
    name: str
    state: RunState
    wakeups: DueWakeups
    client: SchedulerClient
    repository: TaskRepository
    listeners: Listeners
    history: ExecutionHistory | None
    telemetry: SchedulerTelemetry | None
    metrics: EngineMetrics | None
    startup: StartupTasks
    pauses: PauseWatch
    registry: ExecutionRegistry
    completion_batcher: CompletionBatcher | None
    async_runner: AsyncRunner
    runner: ExecutionRunner
    queued_claims: QueuedClaims
    heartbeats: HeartbeatUpdater
    dead_executions: DeadExecutionDetector


def assemble(
    options: SchedulerOptions, name: str, tasks: list[Task[Any]], dialect: SqlDialect
) -> SchedulerParts:
    state = RunState()
    history = ExecutionHistory(options.history, options.clock) if options.history else None
    extra = () if history is None else (history.prune_task,)
    telemetry = (
        None
        if options.telemetry is None
        else SchedulerTelemetry(options.telemetry, options.engine, dialect, options.table_name, options.clock)
    )
    metrics = None if telemetry is None else telemetry.metrics
    interceptors = options.interceptors
    if telemetry is not None and telemetry.interceptor is not None:
        interceptors = (telemetry.interceptor, *interceptors)  # outermost
    listeners = Listeners(
        options.listeners + (() if history is None else (history,)) + (() if metrics is None else (metrics,))
    )
    wakeups = DueWakeups(options, state, listeners)
    resolver = TaskResolver(
        [*tasks, *extra],
        on_unresolved=lambda _name: listeners.on_scheduler_event(SchedulerEventType.UNRESOLVED_TASK),
    )
    install_session_setup(options.engine, dialect)
    repository = TaskRepository(
        options.engine,
        dialect,
        resolver,
        table_name=options.table_name,
        picked_by=name,
        priority_enabled=options.priority,
        notify_channel=channel_for(options.table_name) if options.listen_notify else None,
    )
    if history is not None:
        history.bind(repository)
    client = SchedulerClient(
        options.engine,
        serializer=options.serializer,
        clock=options.clock,
        _repository=repository,
        _on_scheduled=wakeups.execution_scheduled,
        _schedule_tracing=None if telemetry is None else telemetry.bind(repository, options.clock),
    )
    registry = ExecutionRegistry()
    completion_batcher = CompletionBatcher(repository) if options.batch_completions else None
    async_runner = AsyncRunner()
    runner = ExecutionRunner(
        repository=repository,
        serializer=options.serializer,
        clock=options.clock,
        listeners=listeners,
        interceptors=interceptors,
        registry=registry,
        state=state,
        client_factory=lambda: client,
        heartbeat_interval=options.heartbeat_interval,
        missed_heartbeats_limit=options.missed_heartbeats_limit,
        on_scheduled=wakeups.execution_scheduled,
        async_runner=async_runner,
        failure_log_level=options.failure_log_level,
        failure_log_stack_trace=options.failure_log_stack_trace,
        writer=completion_batcher,
        outage=options.outage,
    )
    queued_claims = QueuedClaims()
    return SchedulerParts(
        options=options,
        name=name,
        state=state,
        wakeups=wakeups,
        client=client,
        repository=repository,
        listeners=listeners,
        history=history,
        telemetry=telemetry,
        metrics=metrics,
        # Start-up scheduling writes without listeners: no immediate-execution hints before
        # the poller even runs.
        startup=StartupTasks(
            options.startup_tasks + extra,
            SchedulerClient(
                options.engine, serializer=options.serializer, clock=options.clock, _repository=repository
            ),
            options.clock,
            listeners,
            options.outage,
        ),
        pauses=PauseWatch(repository, options.polling_interval),
        registry=registry,
        completion_batcher=completion_batcher,
        async_runner=async_runner,
        runner=runner,
        queued_claims=queued_claims,
        heartbeats=HeartbeatUpdater(
            repository,
            registry,
            options.clock,
            listeners,
            queued_claims,
            outage=options.outage,
            completions=completion_batcher,
        ),
        dead_executions=DeadExecutionDetector(
            repository,
            options.serializer,
            options.clock,
            listeners,
            options.heartbeat_interval * options.missed_heartbeats_limit,
            options.delete_unresolved_after,
            on_scheduled=lambda task, instance_id, when: wakeups.execution_scheduled(
                TaskInstanceId(task, instance_id), when
            ),
            on_handled=each_of(
                None if history is None else history.dead_execution_handled,
                None if metrics is None else metrics.dead_execution_handled,
            ),
        ),
    )
