"""``application.yml``'s ``ekbatan.jobs`` and ``ekbatan.observability`` sections onto the
``JobRegistry`` and event pipeline builders: settings flow one way, from the typed sections into
plain builder calls, so the engine, its facade and the pipeline never import the settings models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ekbatan.core.config import JobsConfig, JobsHistoryConfig, ObservabilityConfig
from ekbatan.distributed_jobs import JobRegistryBuilder
from ekbatan.distributed_jobs.scheduler import HistoryRetention
from ekbatan.local_event_handler import EventPipelineTelemetry

__all__ = ["apply_jobs_settings", "apply_observability_settings", "pipeline_telemetry", "telemetry_options"]

B = TypeVar("B", bound=JobRegistryBuilder)


def apply_jobs_settings(builder: B, jobs: JobsConfig) -> B:
    """Apply every ``ekbatan.jobs`` key that is set, and only those; returns ``builder``.

    A key set to zero (``shutdown-max-wait: PT0S``) is applied; an absent key keeps the
    builder's value. Builder calls made afterwards override it.
    """
    if not isinstance(jobs, JobsConfig):
        raise TypeError(
            f"apply_jobs_settings takes the ekbatan.jobs section (settings.jobs), got {type(jobs).__name__}"
        )
    calls: list[tuple[Any, Callable[[Any], object]]] = [
        (jobs.polling_interval, builder.poll_interval),
        (jobs.heartbeat_interval, builder.heartbeat_interval),
        (jobs.missed_heartbeats_limit, builder.missed_heartbeats_limit),
        (jobs.shutdown_max_wait, builder.shutdown_max_wait),
    ]
    for value, call in calls:
        # "is not None", never truthiness: timedelta(0) is falsy and PT0S must still apply
        if value is not None:
            call(value)
    if jobs.history is not None:
        _apply_history(builder, jobs.history)
    if jobs.misfire_policy is not None:
        try:
            builder.misfire_policy(jobs.misfire_policy)
        except ValueError as e:
            raise ValueError(f"ekbatan.jobs.misfire-policy: {e}") from None
    return builder


def _apply_history(builder: JobRegistryBuilder, history: JobsHistoryConfig) -> None:
    """``ekbatan.jobs.history``: on unless ``enabled: false``, each key set replacing its default."""
    if history.enabled is False:
        builder.execution_history(False)
        return
    default = HistoryRetention()
    retention = HistoryRetention(
        succeeded=history.succeeded_retention or default.succeeded,
        failed=history.failed_retention or default.failed,
        max_runs_per_task=history.max_runs_per_task or default.max_runs_per_task,
        prune_every=history.prune_interval or default.prune_every,
    )
    builder.execution_history(retention=retention, keep_task_data=bool(history.keep_task_data))


def telemetry_options(observability: ObservabilityConfig, metrics_registry: Any) -> dict[str, Any] | None:
    """``ekbatan.observability`` as the keyword arguments of the builders' ``telemetry(...)``
    (None: off). ``metrics_registry`` is where the metrics are served in Prometheus' format
    (None: only to an OpenTelemetry SDK meter provider, if the application installed one)."""
    if not observability.enabled:
        return None
    options: dict[str, Any] = {
        "metrics": observability.metrics,
        "traces": observability.traces,
        "database_gauges": observability.database_gauges,
    }
    if observability.gauge_interval is not None:
        options["gauge_interval"] = observability.gauge_interval
    if observability.metrics and metrics_registry is not None:
        options["prometheus_registry"] = metrics_registry
    return options


def apply_observability_settings(
    builder: B, observability: ObservabilityConfig, metrics_registry: Any = None
) -> B:
    """The scheduler's telemetry from ``ekbatan.observability``; returns ``builder``."""
    options = telemetry_options(observability, metrics_registry)
    if options is not None:
        builder.telemetry(
            True,
            semantic_conventions=observability.semantic_conventions,
            schedule_context=observability.schedule_context,
            **options,
        )
    return builder


def pipeline_telemetry(
    observability: ObservabilityConfig, metrics_registry: Any = None
) -> EventPipelineTelemetry | None:
    """The event pipeline jobs' telemetry from ``ekbatan.observability`` (None: off)."""
    options = telemetry_options(observability, metrics_registry)
    if options is None:
        return None
    return EventPipelineTelemetry(**options, action_context=observability.action_context)
