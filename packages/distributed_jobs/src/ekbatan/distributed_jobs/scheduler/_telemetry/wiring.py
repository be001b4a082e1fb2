"""Making the engine's meter, tracer and their users from :class:`TelemetrySettings` (the
only module here that touches OpenTelemetry's globals)."""

from __future__ import annotations

from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._telemetry.gauges import TableGauges
from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics
from ekbatan.distributed_jobs.scheduler._telemetry.propagation import ScheduleTracing, TraceContexts
from ekbatan.distributed_jobs.scheduler._telemetry.settings import (
    DEFAULT_NAMES_REFRESH,
    SCOPE,
    TelemetrySettings,
    package_version,
    require_api,
)
from ekbatan.distributed_jobs.scheduler._telemetry.tracing import ExecutionTracing


def _meter(settings: TelemetrySettings) -> Any:
    from opentelemetry import metrics

    provider = settings.meter_provider or metrics.get_meter_provider()
    return provider.get_meter(SCOPE, package_version())


def engine_metrics(settings: TelemetrySettings) -> EngineMetrics:
    return EngineMetrics(_meter(settings), semantic_conventions=settings.semantic_conventions)


def table_gauges(settings: TelemetrySettings, repository: TaskRepository, clock: Clock) -> TableGauges:
    gauges = TableGauges(repository, clock, settings.gauge_interval)
    gauges.register(_meter(settings))
    return gauges


def _tracer(provider: Any) -> Any:
    from opentelemetry import trace

    return (provider or trace.get_tracer_provider()).get_tracer(SCOPE, package_version())


def execution_tracing(settings: TelemetrySettings, contexts: TraceContexts | None) -> ExecutionTracing:
    return ExecutionTracing(
        _tracer(settings.tracer_provider),
        contexts if settings.schedule_context != "off" else None,
        child_of_schedule=settings.schedule_context == "parent",
    )


def schedule_tracing(
    repository: TaskRepository, clock: Clock, tracer_provider: Any, contexts: TraceContexts | None = None
) -> ScheduleTracing:
    require_api()
    return ScheduleTracing(
        _tracer(tracer_provider),
        contexts
        or TraceContexts(
            repository.engine, repository.dialect, repository.table_name, clock, DEFAULT_NAMES_REFRESH
        ),
    )
