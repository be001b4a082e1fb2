"""Both pipeline jobs from the ``ekbatan.local-event-handler`` section in one call: the one place
that section becomes builder calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ekbatan.core.config import EkbatanSettings, LocalEventHandlerConfig
from ekbatan.core.outbox import Clock, EventCodec, UtcClock
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.local_event_handler._telemetry.settings import EventPipelineTelemetry
from ekbatan.local_event_handler.fanout import EventFanoutJob
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry
from ekbatan.local_event_handler.handling import EventHandlingJob
from ekbatan.local_event_handler.pipeline_job import PipelineJob


def event_pipeline_jobs(
    config: LocalEventHandlerConfig | None,
    *,
    database_registry: DatabaseRegistry,
    event_handler_registry: EventHandlerRegistry,
    clock: Clock | None = None,
    codec: EventCodec | None = None,
    telemetry: EventPipelineTelemetry | None = None,
) -> list[PipelineJob]:
    """The fan-out job, and the handling job when ``handling.enabled`` is true, from the
    ``ekbatan.local-event-handler`` section (``settings.local_event_handler``; None: defaults).

    Keys that are set override the builders' defaults; absent keys keep them. ``clock``
    defaults to the UTC wall clock and ``codec`` to the process-wide one. The fan-out wakes
    this process's handling job as soon as it has written notifications. ``telemetry``: both
    jobs' metrics and traces (as their builders' ``telemetry(...)``; None: off).
    """
    config = LocalEventHandlerConfig() if config is None else _section(config)
    clock = UtcClock() if clock is None else clock
    fanout = (
        EventFanoutJob.builder()
        .database_registry(database_registry)
        .event_handler_registry(event_handler_registry)
        .clock(clock)
        .telemetry_settings(telemetry)
    )
    # settings flow one way: each key that is set becomes a plain builder call
    _call_where_set(
        (config.fanout_poll_delay, fanout.poll_delay), (config.fanout_batch_size, fanout.batch_size)
    )
    jobs: list[PipelineJob] = []
    if config.handling.enabled:
        handling = (
            EventHandlingJob.builder()
            .database_registry(database_registry)
            .event_handler_registry(event_handler_registry)
            .clock(clock)
            .telemetry_settings(telemetry)
        )
        _call_where_set(
            (config.handling_poll_delay, handling.poll_delay),
            (config.handling_batch_size, handling.batch_size),
            (config.handling_max_backoff_cap, handling.max_backoff_cap),
            (config.handling_retention_window, handling.retention_window),
            (config.handling_handler_timeout, handling.handler_timeout),
        )
        if codec is not None:
            handling.codec(codec)
        handling_job = handling.build()
        fanout.wake_after_fanout(handling_job)
        jobs.append(handling_job)
    jobs.insert(0, fanout.build())
    return jobs


def _section(config: object) -> LocalEventHandlerConfig:
    """``config`` itself when it is the section; an error naming what to pass otherwise."""
    if isinstance(config, LocalEventHandlerConfig):
        return config
    hint = " (pass settings.local_event_handler)" if isinstance(config, EkbatanSettings) else ""
    raise TypeError(
        f"event_pipeline_jobs takes the ekbatan.local-event-handler section or None; got {type(config).__name__}{hint}"
    )


def _call_where_set(*calls: tuple[Any, Callable[[Any], object]]) -> None:
    """``call(value)`` for each value that is set (``is not None``: a zero duration is set)."""
    for value, call in calls:
        if value is not None:
            call(value)
