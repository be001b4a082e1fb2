"""Making the engine's meters, tracers and their users from :class:`TelemetrySettings` (the
only module here that touches OpenTelemetry's globals).

A provider that is OpenTelemetry's own no-op (the global one before the application installs
an SDK) gets nothing built for it: calling no-op instruments and spans thousands of times a
second costs a worker a share of its time and records nothing. So telemetry has no cost until
an SDK is installed — before the scheduler is built; one INFO line says when it was not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._telemetry.gauges import TableGauges
from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics
from ekbatan.distributed_jobs.scheduler._telemetry.prometheus import engine_collector
from ekbatan.distributed_jobs.scheduler._telemetry.propagation import ScheduleTracing, TraceContexts
from ekbatan.distributed_jobs.scheduler._telemetry.settings import (
    DEFAULT_NAMES_REFRESH,
    SCOPE,
    TelemetrySettings,
    package_version,
    require_api,
)
from ekbatan.distributed_jobs.scheduler._telemetry.tracing import ExecutionTracing

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.telemetry")


def sdk_provider(given: Any, kind: str, *, who: str = "the scheduler", quiet: bool = False) -> Any | None:
    """``given``, else OpenTelemetry's global provider of ``kind`` ("metrics" or "trace"); None
    when that is the API's own no-op (its module is the API package's, an SDK's is not), said
    in one INFO line naming ``who`` is built without it unless ``quiet``."""
    import opentelemetry.metrics
    import opentelemetry.trace

    api = opentelemetry.metrics if kind == "metrics" else opentelemetry.trace
    provider = given or (api.get_meter_provider() if kind == "metrics" else api.get_tracer_provider())
    if type(provider).__module__.startswith(api.__name__):
        if not quiet:
            noun = "meter" if kind == "metrics" else "tracer"
            log.info(
                "telemetry: no OpenTelemetry SDK %s provider is installed, so no %s are recorded; install "
                "one (set_%s_provider) before building %s, or pass it to telemetry()",
                noun,
                "metrics" if kind == "metrics" else "spans",
                noun,
                who,
            )
        return None
    return provider


def sdk_meter_provider(settings: TelemetrySettings) -> Any | None:
    # with a Prometheus registry the metrics are served anyway: no SDK is no news
    quiet = settings.prometheus_registry is not None
    return sdk_provider(settings.meter_provider, "metrics", quiet=quiet) if settings.metrics else None


def sdk_tracer_provider(given: Any) -> Any | None:
    return sdk_provider(given, "trace")


def engine_metrics(settings: TelemetrySettings) -> tuple[EngineMetrics | None, Any]:
    """The metrics ``settings`` ask for (None when nothing would read them: no SDK meter
    provider, no Prometheus registry), reported to the SDK's meter, which comes second."""
    provider = sdk_meter_provider(settings)
    registry = settings.prometheus_registry if settings.metrics else None
    if provider is None and registry is None:
        return None, None
    metrics = EngineMetrics(semantic_conventions=settings.semantic_conventions)
    meter = None if provider is None else provider.get_meter(SCOPE, package_version())
    if meter is not None:
        metrics.report_to(meter)
    return metrics, meter


def table_gauges(
    settings: TelemetrySettings, metrics: EngineMetrics, meter: Any, repository: TaskRepository, clock: Clock
) -> tuple[TableGauges | None, Callable[[], None]]:
    """The gauges read from the table (when asked for), reported to ``meter``; the Prometheus
    collector of ``metrics`` and them registered; and what unregisters it (at stop)."""
    gauges = TableGauges(repository, clock, settings.gauge_interval) if settings.database_gauges else None
    if gauges is not None and meter is not None:
        gauges.register(meter)
    registry = settings.prometheus_registry
    if registry is None:
        return gauges, lambda: None
    collector = engine_collector(metrics, gauges)
    registry.register(collector)
    return gauges, lambda: registry.unregister(collector)


def execution_tracing(
    provider: Any, settings: TelemetrySettings, contexts: TraceContexts | None
) -> ExecutionTracing:
    return ExecutionTracing(
        provider.get_tracer(SCOPE, package_version()),
        contexts if settings.schedule_context != "off" else None,
        child_of_schedule=settings.schedule_context == "parent",
    )


def schedule_tracing(
    repository: TaskRepository, clock: Clock, tracer_provider: Any, contexts: TraceContexts | None = None
) -> ScheduleTracing | None:
    """What traces schedule calls; None without an SDK tracer provider."""
    require_api()
    provider = sdk_tracer_provider(tracer_provider)
    if provider is None:
        return None
    return ScheduleTracing(
        provider.get_tracer(SCOPE, package_version()),
        contexts
        or TraceContexts(
            repository.engine, repository.dialect, repository.table_name, clock, DEFAULT_NAMES_REFRESH
        ),
    )


class SchedulerTelemetry:
    """What a scheduler's telemetry settings build, in the order the scheduler can take it:
    the metrics listener and the run spans' interceptor first (the listeners and the runner are
    made before the repository), then, once the repository is, the gauges, the Prometheus
    collector and the schedule calls' tracing (:meth:`bind`)."""

    def __init__(
        self, settings: TelemetrySettings, engine: Any, dialect: Any, table_name: str, clock: Clock
    ) -> None:
        self.settings = settings
        self.metrics, self._meter = engine_metrics(settings)
        self._tracers = sdk_tracer_provider(settings.tracer_provider) if settings.traces else None
        # one per scheduler: a schedule made here makes its task name known to its runs at once
        self.contexts = (
            TraceContexts(engine, dialect, table_name, clock, DEFAULT_NAMES_REFRESH)
            if self._tracers is not None and settings.schedule_context != "off"
            else None
        )
        self.interceptor = (
            None if self._tracers is None else execution_tracing(self._tracers, settings, self.contexts)
        )
        self.gauges: TableGauges | None = None
        #: unregisters the Prometheus collector (at stop)
        self.stop: Callable[[], None] = lambda: None

    def bind(self, repository: TaskRepository, clock: Clock) -> ScheduleTracing | None:
        if self.metrics is not None:
            self.gauges, self.stop = table_gauges(self.settings, self.metrics, self._meter, repository, clock)
        if self.contexts is None:
            return None
        return schedule_tracing(repository, clock, self._tracers, self.contexts)
