"""``application.yml``'s ``ekbatan.jobs`` section onto the ``JobRegistry`` builder: settings flow
one way, from the typed section into plain builder calls, so the engine and its facade never
import the settings models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ekbatan.core.config import JobsConfig, JobsHistoryConfig
from ekbatan.distributed_jobs import JobRegistryBuilder
from ekbatan.distributed_jobs.scheduler import HistoryRetention

__all__ = ["apply_jobs_settings"]

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
