"""``EkbatanRuntime``: the whole product built from one ``application.yml`` and a list of packages,
started and stopped in the right order; what it builds is in docs/wiring/without-di.md.

Every integration (dependency-injector, FastAPI, Flask, ``ekbatan worker``) builds through the
functions here, so they all build the same graph. Start: migrations (only when asked), then the
job registry. Stop: the job registry (its jobs drain while the pools are still open), then the
jobs pool, then the shards' pools.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Unpack

from ekbatan.core import ActionExecutor, DatabaseRegistry, EkbatanSettings, load_settings, migrate
from ekbatan.core.outbox import Clock, EventCodec, UtcClock, default_codec
from ekbatan.core.persistence import ConnectionProvider
from ekbatan.core.sharding import jobs_connection_provider
from ekbatan.distributed_jobs import DistributedJob, JobRegistry, task_definition_of
from ekbatan.distributed_jobs.scheduler import SchedulerBuilder, SchedulerClient, Task
from ekbatan.integrations.builder_settings import (
    apply_jobs_settings,
    apply_observability_settings,
    pipeline_telemetry,
)
from ekbatan.integrations.construction import Offer, construct, offers_of_container
from ekbatan.integrations.discovery import Discovered, scan
from ekbatan.integrations.metrics_exposition import (
    RuntimeMetrics,
    new_metrics_registry,
    require_prometheus_client,
)
from ekbatan.integrations.options import DEFAULT_CONFIG, EkbatanOptions, OptionFields
from ekbatan.local_event_handler import EventHandlerRegistry, event_pipeline_jobs

log = logging.getLogger("ekbatan.integrations")


def load(config: str | os.PathLike[str] | EkbatanSettings | None) -> EkbatanSettings:
    """Settings from a path (default ``application.yml``), or the given settings as they are."""
    if isinstance(config, EkbatanSettings):
        return config
    return load_settings(Path(DEFAULT_CONFIG if config is None else config))


@dataclass
class EkbatanRuntime:
    """What :func:`build_runtime` built. ``job_registry`` is None when there is no job and no
    task at all."""

    settings: EkbatanSettings
    discovered: Discovered
    database_registry: DatabaseRegistry
    action_executor: ActionExecutor
    event_handler_registry: EventHandlerRegistry
    jobs: tuple[DistributedJob, ...]
    job_registry: JobRegistry | None
    jobs_pool: ConnectionProvider | None
    migrate_on_start: bool = False
    #: the engine tasks registered in the job registry's scheduler (discovered and extra)
    tasks: tuple[Task[Any], ...] = ()
    #: the options it was built with
    options: EkbatanOptions = field(default_factory=EkbatanOptions)
    #: the ``prometheus_client`` registry the metrics are served from (None: not served so;
    #: ``ekbatan.observability.metrics`` is off, or ``prometheus: false``)
    metrics_registry: Any = field(default=None, repr=False)
    #: the runtime's metrics on the application's registry, taken off it at stop
    _on_given_registry: RuntimeMetrics | None = field(default=None, repr=False)
    _state: str = field(default="built", repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _client: SchedulerClient | None = field(default=None, repr=False)

    @property
    def started(self) -> bool:
        return self._state == "started"

    @property
    def scheduler_client(self) -> SchedulerClient:
        """Schedules, reschedules, cancels and lists executions in ``scheduled_tasks`` (jobs pool).

        It knows the runtime's tasks: their data comes back decoded as their ``data_type``."""
        if self.job_registry is not None:
            return self.job_registry.scheduler.client
        with self._lock:
            if self._client is None:
                pool = self.jobs_pool or jobs_connection_provider(self.settings, strict=True)
                self.jobs_pool = pool
                self._client = SchedulerClient(pool.engine, self.tasks, dialect=str(pool.dialect))
            return self._client

    def start(self) -> None:
        """Run the migrations if asked, then start the job registry (idempotent)."""
        with self._lock:
            if self._state == "started":
                return
            if self._state == "stopped":
                raise RuntimeError("this Ekbatan runtime was stopped; build a new one to start again")
            if self.migrate_on_start:
                for report in migrate(self.settings):
                    log.info("migrations: %s", report)
            if self.job_registry is not None:
                self.job_registry.start()
            self._state = "started"

    def stop(self) -> None:
        """Stop the job registry, then close the pools (idempotent; safe after a failed start)."""
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
        try:
            if self.job_registry is not None:
                self.job_registry.stop()
            if self._on_given_registry is not None:
                self._on_given_registry.close()
        finally:
            try:
                if self.jobs_pool is not None:
                    self.jobs_pool.close()
            finally:
                # a registry the application passed in is the application's to close
                if self.options.database_registry is None:
                    self.database_registry.close()

    def __enter__(self) -> EkbatanRuntime:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def ekbatan_offers(
    settings: EkbatanSettings,
    database_registry: DatabaseRegistry,
    executor: ActionExecutor,
    clock: Clock,
    codec: EventCodec,
) -> dict[str, Offer]:
    """What Ekbatan itself offers to discovered classes' constructors, by name and type."""
    return {
        "settings": Offer(lambda: settings, EkbatanSettings),
        "database_registry": Offer(lambda: database_registry, DatabaseRegistry),
        "action_executor": Offer(lambda: executor, ActionExecutor),
        "executor": Offer(lambda: executor, ActionExecutor),
        "clock": Offer(lambda: clock, type(clock)),
        "codec": Offer(lambda: codec, EventCodec),
    }


def job_registry_for(
    jobs: list[DistributedJob],
    jobs_pool: ConnectionProvider,
    settings: EkbatanSettings,
    customize_scheduler: Callable[[SchedulerBuilder], Any] | None = None,
    *,
    require_database: bool = True,
    tasks: Iterable[Task[Any]] = (),
    metrics_registry: Any = None,
) -> JobRegistry:
    """The job registry of ``jobs`` and ``tasks`` on ``jobs_pool``; the framework's lifecycle
    starts and stops it. Its telemetry follows ``ekbatan.observability`` (the metrics served
    from ``metrics_registry`` too, when given)."""
    builder = apply_jobs_settings(
        # execution history on by default here (ekbatan.jobs.history.enabled: false turns it off)
        JobRegistry.builder()
        .connection_provider(jobs_pool)
        .with_jobs(jobs)
        .with_tasks(tasks)
        .execution_history(),
        settings.jobs,
    )
    apply_observability_settings(builder, settings.observability, metrics_registry)
    builder.register_shutdown_hook(False).require_database(require_database)
    if customize_scheduler is not None:
        builder.customize_scheduler(customize_scheduler)
    return builder.build()


def pipeline_jobs_for(
    settings: EkbatanSettings,
    database_registry: DatabaseRegistry,
    handler_registry: EventHandlerRegistry,
    clock: Clock,
    codec: EventCodec,
    metrics_registry: Any = None,
) -> list[DistributedJob]:
    """The fan-out job when there is a handler (and the handling job when enabled); else none.
    Their telemetry follows ``ekbatan.observability``."""
    if not handler_registry:
        return []
    return list(
        event_pipeline_jobs(
            settings.local_event_handler,
            database_registry=database_registry,
            event_handler_registry=handler_registry,
            clock=clock,
            codec=codec,
            telemetry=pipeline_telemetry(settings.observability, metrics_registry),
        )
    )


def tasks_for(discovered: Discovered, sources: list[Mapping[str, Offer]]) -> list[Task[Any]]:
    """The discovered tasks as engine tasks: a decorated function already is one; a decorated
    class is built (its constructor parameters resolved as a job's) and its ``execute`` wrapped."""
    tasks: list[Task[Any]] = []
    for found in discovered.tasks:
        if isinstance(found, Task):
            tasks.append(found)
            continue
        definition = task_definition_of(found)
        if definition is None:  # pragma: no cover - discovery collects marked objects only
            raise TypeError(f"{found!r} is not a task")
        tasks.append(definition.build(construct(found, sources).execute))
    return tasks


def build_runtime(
    config: str | os.PathLike[str] | EkbatanSettings | None = None,
    packages: Iterable[str | ModuleType] | str | ModuleType | None = None,
    *,
    options: EkbatanOptions | None = None,
    **fields: Unpack[OptionFields],
) -> EkbatanRuntime:
    """Build everything; connect to nothing. Raises with the bad key, class or parameter named.

    What to build and how to run it is an :class:`EkbatanOptions` — ``options=`` — and/or its
    fields as keyword arguments (``config`` and ``packages`` also by position); a keyword given
    beside ``options`` wins over it. Every other entry point (FastAPI, Flask, the container,
    ``ekbatan worker``) takes the same options and builds through this function.

    ``customize_scheduler`` adjusts the engine's builder last, as ``JobRegistry``'s escape hatch
    does (e.g. ``lambda b: b.threads(8)``).

    ``require_database`` (default True): ``start()`` fails at once, naming the jobs pool, when
    its database cannot be reached; False starts degraded instead (the health endpoints answer
    503 until the scheduler has polled) and the jobs begin when the database answers.

    ``container`` is the application's own dependency-injector container: discovered classes
    get their constructor parameters from it (by name, then by type) before Ekbatan's own
    objects (``settings``, ``database_registry``, ``action_executor``, ``clock``, ``codec``).
    """
    opts = EkbatanOptions.of(options, config=config, packages=packages, **fields)
    config, container = opts.config_or_default, opts.container
    customize_scheduler, require_database = opts.customize_scheduler, opts.require_database
    extra_jobs, extra_handlers = opts.extra_jobs, opts.extra_handlers
    settings = load(config)
    discovered = scan(opts.packages)
    clock = UtcClock() if opts.clock is None else opts.clock
    codec = default_codec if opts.codec is None else opts.codec
    given_registry = opts.database_registry
    metrics_registry, on_given_registry = _metrics_registry(settings, opts)
    # where the scheduler and the pipeline jobs register their collectors
    registers_on = metrics_registry if on_given_registry is None else on_given_registry.registry
    registry = DatabaseRegistry.from_config(settings) if given_registry is None else given_registry
    jobs_pool = None
    try:
        executor = ActionExecutor(
            registry,
            namespace=settings.namespace,
            clock=clock,
            codec=codec,
            # a span per action, its context kept for the handlers' spans (ekbatan.observability.traces)
            tracing=settings.observability.traces,
        )
        sources: list[Mapping[str, Offer]] = [
            offers_of_container(container),
            ekbatan_offers(settings, registry, executor, clock, codec),
        ]
        for action_class in discovered.actions:
            executor.register(construct(action_class, sources))
        handlers = [construct(cls, sources) for cls in discovered.handlers] + list(extra_handlers)
        handler_registry = EventHandlerRegistry.builder().with_handlers(handlers).build()
        jobs: list[DistributedJob] = [construct(cls, sources) for cls in discovered.jobs] + list(extra_jobs)
        jobs += pipeline_jobs_for(settings, registry, handler_registry, clock, codec, registers_on)
        # the same task object discovered and given again in extra_tasks is one task
        tasks = list(
            {id(task): task for task in [*tasks_for(discovered, sources), *opts.extra_tasks]}.values()
        )
        job_registry = None
        if jobs or tasks:
            jobs_pool = jobs_connection_provider(settings, strict=True)
            job_registry = job_registry_for(
                jobs,
                jobs_pool,
                settings,
                customize_scheduler,
                require_database=require_database,
                tasks=tasks,
                metrics_registry=registers_on,
            )
    except BaseException:
        if on_given_registry is not None:
            on_given_registry.close()
        if jobs_pool is not None:
            jobs_pool.close()
        if given_registry is None:
            registry.close()
        raise
    log.info(
        "ekbatan built: %d action(s), %d handler(s), %d job(s), %d task(s)%s",
        len(discovered.actions),
        len(handlers),
        len(jobs),
        len(tasks),
        "" if job_registry is not None else " (no job registry)",
    )
    return EkbatanRuntime(
        settings=settings,
        discovered=discovered,
        database_registry=registry,
        action_executor=executor,
        event_handler_registry=handler_registry,
        jobs=tuple(jobs),
        tasks=tuple(tasks),
        job_registry=job_registry,
        jobs_pool=jobs_pool,
        migrate_on_start=opts.migrate_on_start,
        options=opts,
        metrics_registry=metrics_registry,
        _on_given_registry=on_given_registry,
    )


def _metrics_registry(settings: EkbatanSettings, opts: EkbatanOptions) -> tuple[Any, RuntimeMetrics | None]:
    """Where the metrics are served in Prometheus' format — the options' registry, else a new one
    of the runtime's own; None when ``ekbatan.observability`` does not serve them so — and, on
    the options' registry, the one collector the runtime's metrics are registered there as."""
    observability = settings.observability
    if not (observability.metrics and observability.prometheus):
        return None, None
    require_prometheus_client()
    if opts.metrics_registry is None:
        return new_metrics_registry(), None
    return opts.metrics_registry, RuntimeMetrics(opts.metrics_registry)
