"""Making the engine's meter, tracer and their users from :class:`TelemetrySettings` (the
only module here that touches OpenTelemetry's globals)."""

from __future__ import annotations

from typing import Any

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._telemetry.gauges import TableGauges
from ekbatan.distributed_jobs.scheduler._telemetry.metrics import EngineMetrics
from ekbatan.distributed_jobs.scheduler._telemetry.settings import SCOPE, TelemetrySettings, package_version
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


def execution_tracing(settings: TelemetrySettings) -> ExecutionTracing:
    from opentelemetry import trace

    provider = settings.tracer_provider or trace.get_tracer_provider()
    return ExecutionTracing(provider.get_tracer(SCOPE, package_version()))
