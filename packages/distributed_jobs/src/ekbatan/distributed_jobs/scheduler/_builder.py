"""How a :class:`~ekbatan.distributed_jobs.scheduler.Scheduler` is configured: a builder with
db-scheduler's options and defaults, frozen into :class:`SchedulerOptions` when it builds."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._assembly import assemble
from ekbatan.distributed_jobs.scheduler._clock import Clock, SystemClock
from ekbatan.distributed_jobs.scheduler._history.recorder import PRUNE_TASK
from ekbatan.distributed_jobs.scheduler._history.records import HistoryRetention, HistorySettings
from ekbatan.distributed_jobs.scheduler._liveness.outage import OutagePolicy
from ekbatan.distributed_jobs.scheduler._observability import (
    ExecutionInterceptor,
    SchedulerListener,
)
from ekbatan.distributed_jobs.scheduler._options import (
    DEFAULT_MISSED_HEARTBEATS,
    MAX_NAME_LENGTH,
    MIN_MISSED_HEARTBEATS,
    SchedulerOptions,
    default_scheduler_name,
)
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import (
    PollingKind,
    PollingStrategyConfig,
)
from ekbatan.distributed_jobs.scheduler._scheduler import Scheduler
from ekbatan.distributed_jobs.scheduler._serializers import JsonSerializer, Serializer
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._telemetry.settings import DEFAULT_GAUGE_INTERVAL, TelemetrySettings
from ekbatan.distributed_jobs.scheduler.dialects import Dialect, SqlDialect, resolve_dialect
from ekbatan.distributed_jobs.scheduler.schema import DEFAULT_TABLE_NAME, validate_table_name


class SchedulerBuilder:
    """Options and defaults as db-scheduler's (threads 10, polling 10 s, heartbeat 5 min, …)."""

    def __init__(self, engine: sa.Engine, tasks: Iterable[Task[Any]]) -> None:
        if not isinstance(engine, sa.Engine):
            raise TypeError(f"Scheduler.create needs an SQLAlchemy Engine, got {type(engine).__name__}")
        self._engine = engine
        self._known: list[Task[Any]] = list(tasks)
        self._startup: list[Task[Any]] = []
        self._threads = 10
        self._polling_interval = timedelta(seconds=10)
        self._heartbeat_interval = timedelta(minutes=5)
        self._missed_heartbeats_limit = DEFAULT_MISSED_HEARTBEATS
        self._shutdown_max_wait = timedelta(minutes=30)
        self._delete_unresolved_after = timedelta(days=14)
        self._immediate_execution = True
        self._priority = False
        self._strategy = PollingStrategyConfig.auto()
        self._name: str | None = None
        self._table_name = DEFAULT_TABLE_NAME
        self._serializer: Serializer = JsonSerializer()
        self._clock: Clock = SystemClock()
        self._dialect: str | Dialect | SqlDialect | None = None
        self._listeners: list[SchedulerListener] = []
        self._interceptors: list[ExecutionInterceptor] = []
        self._failure_log_level = logging.WARNING
        self._failure_log_stack_trace = True
        self._shutdown_hook = False
        self._batch_completions = True
        self._listen_notify = True
        self._outage = OutagePolicy()
        self._history: HistorySettings | None = None
        self._telemetry: TelemetrySettings | None = None

    # -- options --------------------------------------------------------------------------
    def start_tasks(self, *tasks: Task[Any]) -> SchedulerBuilder:
        """Known tasks whose ``on_startup`` runs in ``start()`` (recurring tasks schedule
        themselves and reconcile a changed schedule)."""
        self._startup.extend(tasks)
        return self

    def tasks(self, *tasks: Task[Any]) -> SchedulerBuilder:
        self._known.extend(tasks)
        return self

    def threads(self, n: int) -> SchedulerBuilder:
        if n < 1:
            raise ValueError(f"threads must be at least 1, got {n}")
        self._threads = n
        return self

    def polling_interval(self, interval: timedelta) -> SchedulerBuilder:
        if interval <= timedelta(0):
            raise ValueError(
                f"polling interval must be positive, got {interval}; a zero interval would poll in a tight loop"
            )
        self._polling_interval = interval
        return self

    def heartbeat_interval(self, interval: timedelta) -> SchedulerBuilder:
        if interval <= timedelta(0):
            raise ValueError(f"heartbeat interval must be positive, got {interval}")
        self._heartbeat_interval = interval
        return self

    def missed_heartbeats_limit(self, n: int) -> SchedulerBuilder:
        if n < MIN_MISSED_HEARTBEATS:
            raise ValueError(f"missed heartbeats limit must be at least {MIN_MISSED_HEARTBEATS}, got {n}")
        self._missed_heartbeats_limit = n
        return self

    def shutdown_max_wait(self, wait: timedelta) -> SchedulerBuilder:
        if wait < timedelta(0):
            raise ValueError(f"shutdown max wait must not be negative, got {wait}")
        self._shutdown_max_wait = wait
        return self

    def delete_unresolved_after(self, age: timedelta) -> SchedulerBuilder:
        if age <= timedelta(0):
            raise ValueError(f"delete_unresolved_after must be positive, got {age}")
        self._delete_unresolved_after = age
        return self

    def enable_immediate_execution(self, enabled: bool = True) -> SchedulerBuilder:
        """Scheduling something due now (through this scheduler) wakes its poller. On by default."""
        self._immediate_execution = enabled
        return self

    def enable_priority(self, enabled: bool = True) -> SchedulerBuilder:
        self._priority = enabled
        return self

    def poll_using_fetch(self, lower_fraction: float = 0.5, upper_fraction: float = 3.0) -> SchedulerBuilder:
        """db-scheduler's fetch strategy, on every database. Without a ``poll_using_…`` call the
        scheduler chooses: sized lock-and-fetch where the server has ``SKIP LOCKED``, else fetch."""
        self._strategy = PollingStrategyConfig.fetch(lower_fraction, upper_fraction)
        return self

    def poll_using_lock_and_fetch(
        self, lower_fraction: float = 0.5, upper_fraction: float = 1.0
    ) -> SchedulerBuilder:
        self._strategy = PollingStrategyConfig.lock_and_fetch(lower_fraction, upper_fraction)
        return self

    def failure_summary_interval(self, interval: timedelta) -> SchedulerBuilder:
        """While an activity (polling, heartbeats, dead-execution detection, start-up tasks,
        completion writes) keeps failing — the database is down — it logs its first failure,
        then one line per ``interval`` with the count, then its recovery (default 1 minute)."""
        if interval <= timedelta(0):
            raise ValueError(f"failure summary interval must be positive, got {interval}")
        self._outage = replace(self._outage, summary_interval=interval.total_seconds())
        return self

    def max_retry_backoff(self, cap: timedelta) -> SchedulerBuilder:
        """A failing poll (or notification listener) retries after its own interval, doubled
        per failure in a row up to ``cap`` (default 10 s; never below the polling interval):
        how long a recovered database may wait for the scheduler to notice."""
        if cap <= timedelta(0):
            raise ValueError(f"max retry backoff must be positive, got {cap}")
        self._outage = replace(self._outage, max_backoff=cap.total_seconds())
        return self

    def scheduler_name(self, name: str) -> SchedulerBuilder:
        if not name or not name.strip():
            raise ValueError("scheduler name must not be blank")
        self._name = name[:MAX_NAME_LENGTH]
        return self

    def table_name(self, name: str) -> SchedulerBuilder:
        self._table_name = validate_table_name(name)
        return self

    def serializer(self, serializer: Serializer) -> SchedulerBuilder:
        self._serializer = serializer
        return self

    def clock(self, clock: Clock) -> SchedulerBuilder:
        self._clock = clock
        return self

    def dialect(self, dialect: str | Dialect | SqlDialect) -> SchedulerBuilder:
        """Override the dialect otherwise read from the engine's URL (never from a connection)."""
        self._dialect = dialect
        return self

    @property
    def resolved_dialect(self) -> SqlDialect:
        """The dialect the scheduler will use (the override, else from the engine's URL)."""
        return resolve_dialect(self._engine, self._dialect)

    def add_listener(self, listener: SchedulerListener) -> SchedulerBuilder:
        self._listeners.append(listener)
        return self

    def add_interceptor(self, interceptor: ExecutionInterceptor) -> SchedulerBuilder:
        self._interceptors.append(interceptor)
        return self

    def failure_logging(self, level: int | str, stack_trace: bool = True) -> SchedulerBuilder:
        """Log level of a failed execution (``"OFF"`` or 0 to silence), and whether with a traceback."""
        if isinstance(level, str):
            named = {"OFF": 0, "TRACE": 5, **logging.getLevelNamesMapping()}.get(level.upper())
            if named is None:
                raise ValueError(f"unknown log level {level!r}; use OFF, DEBUG, INFO, WARNING or ERROR")
            level = named
        self._failure_log_level = level
        self._failure_log_stack_trace = stack_trace
        return self

    def batch_completions(self, enabled: bool = True) -> SchedulerBuilder:
        """Group-commit the removal of finished one-time executions (default on).

        Off, every execution's completion commits on its own — db-scheduler's write pattern.
        Either way each row is guarded by its version; batching only shares the commit.
        """
        self._batch_completions = enabled
        return self

    def listen_for_notifications(self, enabled: bool = True) -> SchedulerBuilder:
        """PostgreSQL: send ``NOTIFY`` when scheduling and ``LISTEN`` for it, so a task scheduled
        by another process starts without waiting for the next poll (default on; a hint only —
        turn off behind a transaction-pooling PgBouncer, which does not pass notifications)."""
        self._listen_notify = enabled
        return self

    def execution_history(
        self,
        enabled: bool = True,
        *,
        retention: HistoryRetention | None = None,
        keep_task_data: bool = False,
    ) -> SchedulerBuilder:
        """Record every finished run in ``<table>_history`` (off by default for a scheduler built
        by hand; on when built through the integrations): written off the hot path, pruned by
        the recurring task ``ekbatan-history-prune`` as ``retention`` says (default: successes
        7 days, failures 30, at most 100,000 runs per task). ``keep_task_data`` keeps each run's
        task data too."""
        self._history = (
            HistorySettings(retention or HistoryRetention(), keep_task_data=keep_task_data)
            if enabled
            else None
        )
        return self

    def telemetry(
        self,
        enabled: bool = True,
        *,
        metrics: bool = True,
        traces: bool = True,
        database_gauges: bool = True,
        gauge_interval: timedelta = DEFAULT_GAUGE_INTERVAL,
        semantic_conventions: bool = False,
        schedule_context: str = "link",
        prometheus_registry: Any = None,
        meter_provider: Any = None,
        tracer_provider: Any = None,
    ) -> SchedulerBuilder:
        """OpenTelemetry metrics and a span per run (needs ``opentelemetry-api``: the ``otel``
        extra; off by default, and then nothing of it is built). The providers default to
        OpenTelemetry's global ones, a no-op until the application installs an SDK.
        ``database_gauges``: the per-task gauges read from the table (due, oldest due age,
        running, failing, paused, dead), at most once per ``gauge_interval`` per process.
        ``semantic_conventions`` adds ``messaging.process.duration``. A schedule call made under
        a span gets a PRODUCER span whose context is kept in ``<table>_traces`` for the run:
        ``schedule_context`` says whether the run's span links to it (``"link"``), is its child
        (``"parent"``), or neither (``"off"``: nothing kept). ``prometheus_registry`` (a
        ``prometheus_client`` ``CollectorRegistry``): the metrics are served from it too, read
        from the process's own counters at each scrape, no SDK needed (one scheduler per
        registry; unregistered at stop)."""
        self._telemetry = (
            TelemetrySettings(
                metrics=metrics,
                traces=traces,
                database_gauges=database_gauges,
                gauge_interval=gauge_interval,
                semantic_conventions=semantic_conventions,
                schedule_context=schedule_context,
                prometheus_registry=prometheus_registry,
                meter_provider=meter_provider,
                tracer_provider=tracer_provider,
            )
            if enabled
            else None
        )
        return self

    def register_shutdown_hook(self, enabled: bool = True) -> SchedulerBuilder:
        """Stop the scheduler at interpreter exit (``atexit``). No signal handler is installed."""
        self._shutdown_hook = enabled
        return self

    def build(self) -> Scheduler:
        backend = resolve_dialect(self._engine, self._dialect)
        if self._strategy.kind is PollingKind.LOCK_AND_FETCH and not backend.supports_lock_and_fetch:
            raise ValueError(
                f"the lock-and-fetch polling strategy needs SELECT … FOR UPDATE SKIP LOCKED, which "
                f"{backend.name} does not have; use .poll_using_fetch() instead"
            )
        known: dict[str, Task[Any]] = {}
        if self._history is not None and PRUNE_TASK in {t.name for t in (*self._known, *self._startup)}:
            raise ValueError(
                f"{PRUNE_TASK!r} is the execution history's pruning task; name your task otherwise"
            )
        for task in (*self._known, *self._startup):
            # The same task may be passed twice (known and a start task); two different tasks of
            # one name would leave one of them silently without its rows.
            if known.setdefault(task.name, task) is not task:
                raise ValueError(
                    f"two tasks are named {task.name!r} ({known[task.name]!r} and {task!r}); "
                    "task names must be unique: rename one of them"
                )
        options = SchedulerOptions(
            engine=self._engine,
            startup_tasks=tuple(self._startup),
            threads=self._threads,
            polling_interval=self._polling_interval,
            heartbeat_interval=self._heartbeat_interval,
            missed_heartbeats_limit=self._missed_heartbeats_limit,
            shutdown_max_wait=self._shutdown_max_wait,
            delete_unresolved_after=self._delete_unresolved_after,
            immediate_execution=self._immediate_execution,
            priority=self._priority,
            strategy=self._strategy,
            name=self._name,
            table_name=self._table_name,
            serializer=self._serializer,
            clock=self._clock,
            listeners=tuple(self._listeners),
            interceptors=tuple(self._interceptors),
            failure_log_level=self._failure_log_level,
            failure_log_stack_trace=self._failure_log_stack_trace,
            shutdown_hook=self._shutdown_hook,
            batch_completions=self._batch_completions,
            listen_notify=self._listen_notify,
            outage=self._outage,
            history=self._history,
            telemetry=self._telemetry,
        )
        name = self._name or default_scheduler_name()
        return Scheduler(assemble(options, name, list(known.values()), backend))
