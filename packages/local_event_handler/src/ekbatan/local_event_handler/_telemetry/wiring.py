"""Making the pipeline jobs' telemetry from :class:`EventPipelineTelemetry` (the only module here
that reaches OpenTelemetry's globals, through ``metrics``).

A provider that is OpenTelemetry's own no-op (the global one before the application installs an
SDK) gets nothing built for it, and one INFO line says so: install the SDK's providers before
building the jobs, or pass them to ``telemetry()``. With a Prometheus registry the metrics are
built anyway, and each job registers a collector of its own instruments on it (their names do
not overlap, so both jobs can share one registry). The collectors stay registered for as long
as the process runs: a job registry calls nothing on its jobs when it stops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ekbatan.core.outbox import Clock
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.distributed_jobs.scheduler import LocalCollector
from ekbatan.local_event_handler._telemetry.gauges import NotificationGauges
from ekbatan.local_event_handler._telemetry.metrics import (
    FanoutMetrics,
    HandlingMetrics,
    prometheus_registry,
    sdk_meter,
    sdk_tracer,
)
from ekbatan.local_event_handler._telemetry.settings import EventPipelineTelemetry
from ekbatan.local_event_handler._telemetry.tracing import HandlerTracing
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry


def fanout_metrics(settings: EventPipelineTelemetry) -> FanoutMetrics | None:
    """The fan-out's counter; None when nothing would read it (no SDK, no registry)."""
    meter, registry = sdk_meter(settings), prometheus_registry(settings)
    if meter is None and registry is None:
        return None
    metrics = FanoutMetrics()
    if meter is not None:
        metrics.report_to(meter)
    if registry is not None:
        registry.register(LocalCollector(counters=metrics.counters))
    return metrics


@dataclass(frozen=True)
class HandlingTelemetry:
    """What the handling job records into; each part None when not asked for (or no SDK and
    no Prometheus registry)."""

    metrics: HandlingMetrics | None
    tracing: HandlerTracing | None
    gauges: NotificationGauges | None


def handling_telemetry(
    settings: EventPipelineTelemetry,
    database_registry: DatabaseRegistry,
    handlers: EventHandlerRegistry,
    clock: Clock,
) -> HandlingTelemetry | None:
    meter, registry = sdk_meter(settings), prometheus_registry(settings)
    tracer = sdk_tracer(settings)
    metrics, gauges = None, None
    if meter is not None or registry is not None:
        metrics = HandlingMetrics()
        if settings.database_gauges:
            gauges = NotificationGauges(database_registry, handlers, clock, settings.gauge_interval)
        if meter is not None:
            _report_to(meter, metrics, gauges)
        if registry is not None:
            read_gauges = None if gauges is None else gauges.reading
            registry.register(LocalCollector(histograms=metrics.histograms, gauges=read_gauges))
    tracing = None if tracer is None else HandlerTracing(tracer, settings.action_context)
    telemetry = HandlingTelemetry(metrics, tracing, gauges)
    if telemetry.metrics is None and telemetry.tracing is None:
        return None
    return telemetry


def _report_to(meter: Any, metrics: HandlingMetrics, gauges: NotificationGauges | None) -> None:
    metrics.report_to(meter)
    if gauges is not None:
        gauges.register(meter)
