"""What the event pipeline's telemetry records, and where to (no OpenTelemetry import here)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ekbatan.distributed_jobs.scheduler import require_opentelemetry_api, telemetry_version

#: the instrumentation scope the pipeline's meter and tracer are named after
SCOPE = "ekbatan.local_event_handler"
#: how a handler call's span relates to the span of the action that recorded its event
ACTION_CONTEXTS = ("link", "parent", "off")
#: how often, at most, the gauges read from the notifications table are read again, per process
DEFAULT_GAUGE_INTERVAL = timedelta(seconds=30)

_INSTALL = "pip install 'ekbatan-local-event-handler[otel]' (it brings opentelemetry-api)"


@dataclass(frozen=True, slots=True)
class EventPipelineTelemetry:
    """The options of the pipeline jobs' ``telemetry(...)``, as one value (what
    ``event_pipeline_jobs(..., telemetry=...)`` takes).

    ``meter_provider`` / ``tracer_provider``: None for OpenTelemetry's global ones (a no-op until
    the application installs an SDK: then nothing is built). ``database_gauges``: the
    notification gauges, read from the table at most once per ``gauge_interval`` per process.
    ``prometheus_registry``: a ``prometheus_client`` ``CollectorRegistry`` the metrics are
    served from as well, read from the process's own counts at each scrape — with no SDK in
    between, and built even when no SDK is installed.
    """

    metrics: bool = True
    traces: bool = True
    database_gauges: bool = True
    gauge_interval: timedelta = DEFAULT_GAUGE_INTERVAL
    meter_provider: Any = None
    tracer_provider: Any = None
    #: a handler call's span and the span of the action that recorded its event: "link", "parent", "off"
    action_context: str = "link"
    prometheus_registry: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.gauge_interval, timedelta):
            raise TypeError(f"gauge_interval must be a timedelta; got {type(self.gauge_interval).__name__}")
        if self.gauge_interval <= timedelta(0):
            raise ValueError(
                f"gauge_interval must be positive, got {self.gauge_interval}; write e.g. timedelta(seconds=30)"
            )
        if self.action_context not in ACTION_CONTEXTS:
            raise ValueError(
                f"action_context must be one of {', '.join(ACTION_CONTEXTS)}, got {self.action_context!r}: "
                "link (a handler call's span links to the action's), parent (is its child) or off"
            )
        require_api()


def require_api() -> None:
    """Refuse telemetry, saying what to install, when ``opentelemetry-api`` is missing."""
    require_opentelemetry_api("the event pipeline's telemetry", _INSTALL)


def package_version() -> str:
    return telemetry_version("ekbatan-local-event-handler")
