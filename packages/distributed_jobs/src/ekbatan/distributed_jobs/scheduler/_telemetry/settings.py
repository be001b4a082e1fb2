"""What a scheduler's telemetry records, and where to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

#: the instrumentation scope the engine's meter and tracer are named after
SCOPE = "ekbatan.distributed_jobs"
#: how often, at most, the gauges read from the database are read again, per process
DEFAULT_GAUGE_INTERVAL = timedelta(seconds=30)
#: seconds between two reads of the task names with stored trace contexts (see propagation)
DEFAULT_NAMES_REFRESH = 10.0
#: what a run's span is to the span of the schedule call that made it
SCHEDULE_CONTEXTS = ("link", "parent", "off")

_INSTALL = "pip install 'ekbatan-distributed-jobs[otel]' (it brings opentelemetry-api)"


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """``meter_provider`` / ``tracer_provider``: None for OpenTelemetry's global ones (a no-op
    until the application installs an SDK). ``prometheus_registry``: a ``prometheus_client``
    ``CollectorRegistry`` the metrics are served from as well, with no SDK in between."""

    metrics: bool = True
    traces: bool = True
    database_gauges: bool = True
    gauge_interval: timedelta = DEFAULT_GAUGE_INTERVAL
    semantic_conventions: bool = False
    schedule_context: str = "link"
    prometheus_registry: Any = None
    meter_provider: Any = None
    tracer_provider: Any = None

    def __post_init__(self) -> None:
        if self.gauge_interval <= timedelta(0):
            raise ValueError(
                f"gauge_interval must be positive, got {self.gauge_interval}; write e.g. timedelta(seconds=30)"
            )
        if self.schedule_context not in SCHEDULE_CONTEXTS:
            raise ValueError(
                f"schedule_context must be one of {', '.join(SCHEDULE_CONTEXTS)}, got {self.schedule_context!r}: "
                "link (the run's span links to the schedule call's), parent (is its child), off"
            )
        require_api()


def require_api(what: str = "telemetry", install: str = _INSTALL) -> None:
    """Refuse ``what``, saying what to install, when ``opentelemetry-api`` is missing."""
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{what} needs the OpenTelemetry API: {install}") from exc


def package_version(distribution: str = "ekbatan-distributed-jobs") -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:  # a source tree on sys.path
        return "0"
