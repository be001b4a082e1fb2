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
from ekbatan.distributed_jobs.scheduler._telemetry.prometheus import EngineCollector
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


def _sdk_provider(given: Any, kind: str, *, quiet: bool = False) -> Any | None:
    """``given``, else the global provider of ``kind`` ("metrics" or "trace"); None when that
    is the API's own no-op (its module is the API package's, an SDK's is not)."""
    import opentelemetry.metrics
    import opentelemetry.trace

    api = opentelemetry.metrics if kind == "metrics" else opentelemetry.trace
    provider = given or (api.get_meter_provider() if kind == "metrics" else api.get_tracer_provider())
    if type(provider).__module__.startswith(api.__name__):
        if not quiet:
            log.info(
                "telemetry: no OpenTelemetry SDK %s provider is installed, so no %s are recorded; install "
                "one (set_%s_provider) before building the scheduler, or pass it to telemetry()",
                "meter" if kind == "metrics" else "tracer",
                "metrics" if kind == "metrics" else "spans",
                "meter" if kind == "metrics" else "tracer",
            )
        return None
    return provider


def sdk_meter_provider(settings: TelemetrySettings) -> Any | None:
    # with a Prometheus registry the metrics are served anyway: no SDK is no news
    quiet = settings.prometheus_registry is not None
    return _sdk_provider(settings.meter_provider, "metrics", quiet=quiet) if settings.metrics else None


def sdk_tracer_provider(given: Any) -> Any | None:
    return _sdk_provider(given, "trace")


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
    collector = EngineCollector(metrics, gauges)
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
