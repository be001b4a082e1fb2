"""The pipeline's counters and histograms, recorded in the process.

Names, units and attribute keys are a public contract (docs/observability-events.md lists them;
dashboards and alerts are written against them). Attributes name the event type, the handler,
the state or the result — never an event, notification or action id: one series per handler,
however many events. Everything is recorded locally first (the scheduler's
:class:`LocalCounter` / :class:`LocalHistogram`), then reported to an OpenTelemetry SDK meter
and/or read by a Prometheus collector at each scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler import (
    Described,
    LocalCounter,
    LocalHistogram,
    opentelemetry_sdk_provider,
)
from ekbatan.local_event_handler._telemetry.settings import SCOPE, EventPipelineTelemetry, package_version

log = logging.getLogger("ekbatan.local_event_handler.telemetry")


EVENTS_RECORDED = Described(
    "ekbatan.events.recorded",
    "{event}",
    "Events recorded by actions, counted as the fan-out delivers them to their handlers, by event type",
    ("event_type",),
)
HANDLER_DURATION = Described(
    "ekbatan.handler.duration",
    "s",
    "How long a handler call took, by handler and result (succeeded, failed, expired)",
    ("handler", "result"),
)
DELIVERY_LAG = Described(
    "ekbatan.event.delivery_lag",
    "s",
    "From the commit of the action that recorded an event to the start of a handler's first call "
    "for it, by handler",
    ("handler",),
)
NOTIFICATIONS = Described(
    "ekbatan.notifications",
    "{notification}",
    "Notifications not yet handled, by handler and state (pending, failed)",
    ("handler", "state"),
)
OLDEST_PENDING_AGE = Described(
    "ekbatan.notifications.oldest_pending_age",
    "s",
    "How long ago the event of the oldest notification not yet handled was recorded, by handler "
    "(0 when none waits)",
    ("handler",),
)

#: what a handler call came to (the ``result`` attribute of ``ekbatan.handler.duration``)
SUCCEEDED = "succeeded"
FAILED = "failed"  # a retry is scheduled
EXPIRED = "expired"  # failed, and the retention window ends before the next try: discarded


def _sdk_provider(given: Any, kind: str, *, quiet: bool = False) -> Any | None:
    return opentelemetry_sdk_provider(given, kind, who="the event pipeline jobs", quiet=quiet)


def sdk_meter(settings: EventPipelineTelemetry) -> Any | None:
    """The pipeline's SDK meter, or None when metrics are off or no SDK is installed."""
    if not settings.metrics:
        return None
    # with a Prometheus registry the metrics are served anyway: no SDK is no news
    quiet = settings.prometheus_registry is not None
    provider = _sdk_provider(settings.meter_provider, "metrics", quiet=quiet)
    return None if provider is None else provider.get_meter(SCOPE, package_version())


def prometheus_registry(settings: EventPipelineTelemetry) -> Any | None:
    """The ``CollectorRegistry`` to serve the metrics from, or None."""
    return settings.prometheus_registry if settings.metrics else None


def sdk_tracer(settings: EventPipelineTelemetry) -> Any | None:
    if not settings.traces:
        return None
    provider = _sdk_provider(settings.tracer_provider, "trace")
    return None if provider is None else provider.get_tracer(SCOPE, package_version())


class FanoutMetrics:
    """``ekbatan.events.recorded``: counted by the fan-out, once per event, after the commit of
    the round that delivered it to its handlers' notifications."""

    def __init__(self) -> None:
        self.events_recorded = LocalCounter(EVENTS_RECORDED)

    @property
    def counters(self) -> tuple[LocalCounter, ...]:
        return (self.events_recorded,)

    def report_to(self, meter: Any) -> None:
        """Report the counts to an OpenTelemetry ``meter`` as well (an SDK's)."""
        self.events_recorded.observe_with(meter)

    def recorded(self, event_types: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for event_type in event_types:
            counts[event_type] = counts.get(event_type, 0) + 1
        for event_type, count in counts.items():
            self.events_recorded.add((event_type,), count)


class HandlingMetrics:
    """``ekbatan.handler.duration`` {handler, result} and ``ekbatan.event.delivery_lag`` {handler}."""

    def __init__(self) -> None:
        self.duration = LocalHistogram(HANDLER_DURATION)
        self.delivery_lag = LocalHistogram(DELIVERY_LAG)

    @property
    def histograms(self) -> tuple[LocalHistogram, ...]:
        return (self.duration, self.delivery_lag)

    def report_to(self, meter: Any) -> None:
        """Pass every value on to OpenTelemetry histograms of ``meter`` as well (an SDK's)."""
        for histogram in self.histograms:
            histogram.record_with(meter)

    def call(self, handler: str, result: str, seconds: float) -> None:
        self.duration.record(max(seconds, 0.0), (handler, result))

    def lag(self, handler: str, recorded: datetime, started: datetime) -> None:
        self.delivery_lag.record(max((started - recorded).total_seconds(), 0.0), (handler,))
