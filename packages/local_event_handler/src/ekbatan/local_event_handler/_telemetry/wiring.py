"""Making the pipeline jobs' telemetry from :class:`EventPipelineTelemetry` (the only module here
that reaches OpenTelemetry's globals, through ``metrics``).

A provider that is OpenTelemetry's own no-op (the global one before the application installs an
SDK) gets nothing built for it, and one INFO line says so: install the SDK's providers before
building the jobs, or pass them to ``telemetry()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ekbatan.core.outbox import Clock
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.local_event_handler._telemetry.gauges import NotificationGauges
from ekbatan.local_event_handler._telemetry.metrics import (
    FanoutMetrics,
    HandlingMetrics,
    sdk_meter,
    sdk_tracer,
)
from ekbatan.local_event_handler._telemetry.settings import EventPipelineTelemetry
from ekbatan.local_event_handler._telemetry.tracing import HandlerTracing
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry


def fanout_metrics(settings: EventPipelineTelemetry) -> FanoutMetrics | None:
    meter = sdk_meter(settings)
    return None if meter is None else FanoutMetrics(meter)


@dataclass(frozen=True)
class HandlingTelemetry:
    """What the handling job records into; each part None when not asked for (or no SDK)."""

    metrics: HandlingMetrics | None
    tracing: HandlerTracing | None
    gauges: NotificationGauges | None


def handling_telemetry(
    settings: EventPipelineTelemetry,
    database_registry: DatabaseRegistry,
    handlers: EventHandlerRegistry,
    clock: Clock,
) -> HandlingTelemetry | None:
    meter = sdk_meter(settings)
    tracer = sdk_tracer(settings)
    gauges = None
    if meter is not None and settings.database_gauges:
        gauges = NotificationGauges(database_registry, handlers, clock, settings.gauge_interval)
        gauges.register(meter)
    telemetry = HandlingTelemetry(
        None if meter is None else HandlingMetrics(meter),
        None if tracer is None else HandlerTracing(tracer),
        gauges,
    )
    if telemetry.metrics is None and telemetry.tracing is None:
        return None
    return telemetry
