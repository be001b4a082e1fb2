"""``application.yml``'s ``ekbatan.jobs`` section onto the ``JobRegistry`` builder: settings flow
one way, from the typed section into plain builder calls, so the engine and its facade never
import the settings models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ekbatan.core.config import JobsConfig
from ekbatan.distributed_jobs import JobRegistryBuilder

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
    return builder
