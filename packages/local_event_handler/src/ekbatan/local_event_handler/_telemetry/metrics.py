"""The pipeline's counters and histograms, made from an SDK meter.

Names, units and attribute keys are a public contract (docs/observability-events.md lists them;
dashboards and alerts are written against them). Attributes name the event type, the handler,
the state or the result — never an event, notification or action id: one series per handler,
however many events. Each attribute dict is made once per series and reused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler import SECONDS_BUCKETS, opentelemetry_sdk_provider
from ekbatan.local_event_handler._telemetry.settings import SCOPE, EventPipelineTelemetry, package_version

log = logging.getLogger("ekbatan.local_event_handler.telemetry")


EVENTS_RECORDED = "ekbatan.events.recorded"
HANDLER_DURATION = "ekbatan.handler.duration"
DELIVERY_LAG = "ekbatan.event.delivery_lag"
NOTIFICATIONS = "ekbatan.notifications"
OLDEST_PENDING_AGE = "ekbatan.notifications.oldest_pending_age"

#: what a handler call came to (the ``result`` attribute of ``ekbatan.handler.duration``)
SUCCEEDED = "succeeded"
FAILED = "failed"  # a retry is scheduled
EXPIRED = "expired"  # failed, and the retention window ends before the next try: discarded


def _sdk_provider(given: Any, kind: str) -> Any | None:
    return opentelemetry_sdk_provider(given, kind, who="the event pipeline jobs")


def sdk_meter(settings: EventPipelineTelemetry) -> Any | None:
    """The pipeline's meter, or None when metrics are off or nothing would read them."""
    if not settings.metrics:
        return None
    provider = _sdk_provider(settings.meter_provider, "metrics")
    return None if provider is None else provider.get_meter(SCOPE, package_version())


def sdk_tracer(settings: EventPipelineTelemetry) -> Any | None:
    if not settings.traces:
        return None
    provider = _sdk_provider(settings.tracer_provider, "trace")
    return None if provider is None else provider.get_tracer(SCOPE, package_version())


class FanoutMetrics:
    """``ekbatan.events.recorded``: counted by the fan-out, once per event, after the commit of
    the round that delivered it to its handlers' notifications."""

    def __init__(self, meter: Any) -> None:
        self._recorded = meter.create_counter(
            EVENTS_RECORDED,
            unit="{event}",
            description="Events recorded by actions, counted as the fan-out delivers them to their "
            "handlers, by event type",
        )
        self._attributes: dict[str, dict[str, str]] = {}

    def recorded(self, event_types: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for event_type in event_types:
            counts[event_type] = counts.get(event_type, 0) + 1
        for event_type, count in counts.items():
            attributes = self._attributes.get(event_type)
            if attributes is None:
                attributes = self._attributes[event_type] = {"event_type": event_type}
            self._recorded.add(count, attributes)


class HandlingMetrics:
    """``ekbatan.handler.duration`` {handler, result} and ``ekbatan.event.delivery_lag`` {handler}."""

    def __init__(self, meter: Any) -> None:
        self._duration = meter.create_histogram(
            HANDLER_DURATION,
            unit="s",
            description="How long a handler call took, by handler and result (succeeded, failed, expired)",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._lag = meter.create_histogram(
            DELIVERY_LAG,
            unit="s",
            description="From the commit of the action that recorded an event to the start of a "
            "handler's first call for it, by handler",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._by_result: dict[tuple[str, str], dict[str, str]] = {}
        self._by_handler: dict[str, dict[str, str]] = {}

    def call(self, handler: str, result: str, seconds: float) -> None:
        attributes = self._by_result.get((handler, result))
        if attributes is None:
            attributes = self._by_result[(handler, result)] = {"handler": handler, "result": result}
        self._duration.record(max(seconds, 0.0), attributes)

    def lag(self, handler: str, recorded: datetime, started: datetime) -> None:
        attributes = self._by_handler.get(handler)
        if attributes is None:
            attributes = self._by_handler[handler] = {"handler": handler}
        self._lag.record(max((started - recorded).total_seconds(), 0.0), attributes)
