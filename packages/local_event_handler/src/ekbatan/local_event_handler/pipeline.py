"""Both pipeline jobs from ``ekbatan.local-event-handler`` settings in one call."""

from __future__ import annotations

from ekbatan.core.config import EkbatanSettings, LocalEventHandlerConfig
from ekbatan.core.outbox import Clock, EventCodec, UtcClock
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.local_event_handler.fanout import EventFanoutJob
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry
from ekbatan.local_event_handler.handling import EventHandlingJob
from ekbatan.local_event_handler.pipeline_job import PipelineJob


def event_pipeline_jobs(
    settings: LocalEventHandlerConfig | EkbatanSettings | None,
    *,
    database_registry: DatabaseRegistry,
    event_handler_registry: EventHandlerRegistry,
    clock: Clock | None = None,
    codec: EventCodec | None = None,
) -> list[PipelineJob]:
    """The fan-out job, and the handling job when ``handling.enabled`` is true.

    Keys that are set override the builders' defaults; absent keys keep them. ``clock``
    defaults to the UTC wall clock and ``codec`` to the process-wide one. The fan-out wakes
    this process's handling job as soon as it has written notifications.
    """
    if settings is None:
        config = LocalEventHandlerConfig()
    elif isinstance(settings, EkbatanSettings):
        config = settings.local_event_handler
    elif isinstance(settings, LocalEventHandlerConfig):
        config = settings
    else:
        raise TypeError(
            "settings must be the loaded EkbatanSettings, its local_event_handler part, or None; "
            f"got {type(settings).__name__}"
        )
    clock = UtcClock() if clock is None else clock
    fanout = (
        EventFanoutJob.builder()
        .database_registry(database_registry)
        .event_handler_registry(event_handler_registry)
        .clock(clock)
        .apply_settings(config)
    )
    jobs: list[PipelineJob] = []
    if config.handling.enabled:
        handling = (
            EventHandlingJob.builder()
            .database_registry(database_registry)
            .event_handler_registry(event_handler_registry)
            .clock(clock)
            .apply_settings(config)
        )
        if codec is not None:
            handling.codec(codec)
        handling_job = handling.build()
        fanout.wake_after_fanout(handling_job)
        jobs.append(handling_job)
    jobs.insert(0, fanout.build())
    return jobs
