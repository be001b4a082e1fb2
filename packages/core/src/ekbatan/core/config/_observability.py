"""``ekbatan.observability``: metrics and traces of the scheduler and the event pipeline.

Everything is off until ``metrics`` or ``traces`` is true. Metrics are recorded in each process
and served in Prometheus' text format (``prometheus`` — on by default once metrics are; needs
``prometheus-client``) and, when the application installed an OpenTelemetry SDK meter provider,
reported to it too. Spans need an OpenTelemetry SDK tracer provider the application installs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ConfigDict, field_validator

from ekbatan.core.config._durations import IsoDuration, format_iso_duration
from ekbatan.core.config._key_folding import KeyFoldingModel

#: how a consumer's span (a run, a handler call) relates to its producer's (the ``schedule()``
#: call, the action that recorded the event)
SCHEDULE_CONTEXTS = ("link", "parent", "off")


class ObservabilityConfig(KeyFoldingModel):
    """``metrics``/``traces`` (default false); ``prometheus`` (default true); ``database-gauges``
    (default true) read at most once per ``gauge-interval`` (default PT30S) per process;
    ``semantic-conventions`` (default false) adds ``messaging.process.duration``;
    ``schedule-context`` and ``action-context`` link | parent | off (a run's span and its
    ``schedule()`` call's; a handler call's span and its action's); ``metrics-port``/``metrics-host``: where
    ``ekbatan worker`` serves ``/metrics`` (absent port: not served; host default 127.0.0.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metrics: bool = False
    traces: bool = False
    prometheus: bool = True
    database_gauges: bool = True
    gauge_interval: IsoDuration | None = None
    semantic_conventions: bool = False
    schedule_context: str = "link"
    action_context: str = "link"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    @property
    def enabled(self) -> bool:
        return self.metrics or self.traces

    @field_validator("gauge_interval")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(f"must be positive, got {format_iso_duration(value)}; write e.g. PT30S")
        return value

    @field_validator("schedule_context", "action_context")
    @classmethod
    def _a_context(cls, value: str, info: Any) -> str:
        if value not in SCHEDULE_CONTEXTS:
            consumer, producer = (
                ("a run's span", "the span that scheduled it")
                if info.field_name == "schedule_context"
                else ("a handler call's span", "the span of the action that recorded its event")
            )
            raise ValueError(
                f"unrecognized context {value!r}; write link ({consumer} links to {producer}), parent (it is "
                "that span's child) or off"
            )
        return value

    @field_validator("metrics_port", mode="before")
    @classmethod
    def _a_port_number(cls, value: Any) -> Any:
        # pydantic's own "valid integer" message names no port to write: say it here
        if (isinstance(value, str) and not value.strip().isdigit()) or isinstance(value, bool | float):
            raise ValueError(f"must be a TCP port number, got {value!r}; write e.g. 9464")
        return value

    @field_validator("metrics_port")
    @classmethod
    def _a_port(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= 65535:
            raise ValueError(
                f"must be a TCP port from 1 to 65535 (0: any free port), got {value}; write e.g. 9464"
            )
        return value
