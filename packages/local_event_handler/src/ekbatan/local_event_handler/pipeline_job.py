"""What the fan-out and handling jobs share: their options, their loop, their wake-ups.

Each is an ordinary :class:`~ekbatan.distributed_jobs.DistributedJob` with a fixed-delay
schedule of ``poll_delay``. Whichever instance claims its row keeps running rounds for as long
as it holds it (heartbeats keep the claim alive), so exactly one instance of the cluster runs
each job; the others stay idle for it and take over if that instance dies.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, Self

from ekbatan.core.outbox import Clock
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules
from ekbatan.local_event_handler._telemetry.settings import DEFAULT_GAUGE_INTERVAL, EventPipelineTelemetry
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry
from ekbatan.local_event_handler.listening import ShardListeners
from ekbatan.local_event_handler.option_checks import require_positive, require_timedelta
from ekbatan.local_event_handler.polling_loop import run_rounds

DEFAULT_POLL_DELAY = timedelta(seconds=1)


class PipelineJobBuilder:
    """Options both jobs have. Every setter returns the builder."""

    def __init__(self, default_name: str, default_batch_size: int) -> None:
        self._name = default_name
        self._poll_delay = DEFAULT_POLL_DELAY
        self._batch_size = default_batch_size
        self._database_registry: DatabaseRegistry | None = None
        self._handlers: EventHandlerRegistry | None = None
        self._clock: Clock | None = None
        self._wakeups = True
        self._telemetry: EventPipelineTelemetry | None = None

    def name(self, name: str) -> Self:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"the job name must be a non-blank string; got {name!r}")
        self._name = name
        return self

    def poll_delay(self, delay: timedelta) -> Self:
        """How long an idle job waits before looking again (default 1 s)."""
        require_timedelta(delay, "poll_delay")
        require_positive(delay, "poll_delay", "timedelta(seconds=1)")
        self._poll_delay = delay
        return self

    def batch_size(self, size: int) -> Self:
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"batch_size must be an int; got {type(size).__name__}")
        require_positive(size, "batch_size", "100")
        self._batch_size = size
        return self

    def database_registry(self, registry: DatabaseRegistry) -> Self:
        self._database_registry = registry
        return self

    def event_handler_registry(self, registry: EventHandlerRegistry) -> Self:
        self._handlers = registry
        return self

    def clock(self, clock: Clock) -> Self:
        """Where "now" comes from: ``UtcClock()`` in production, a settable clock in tests."""
        self._clock = clock
        return self

    def wakeups(self, enabled: bool) -> Self:
        """Listen for PostgreSQL notifications of new rows while running (default on)."""
        self._wakeups = bool(enabled)
        return self

    def telemetry(
        self,
        enabled: bool = True,
        *,
        meter_provider: Any = None,
        tracer_provider: Any = None,
        metrics: bool = True,
        traces: bool = True,
        database_gauges: bool = True,
        gauge_interval: timedelta = DEFAULT_GAUGE_INTERVAL,
        prometheus_registry: Any = None,
        action_context: str = "link",
    ) -> Self:
        """OpenTelemetry metrics and traces of this job (needs ``opentelemetry-api``; off by
        default, and then nothing of it is built or imported). The providers default to
        OpenTelemetry's global ones, a no-op until the application installs an SDK — install it
        before building the job. The fan-out counts ``ekbatan.events.recorded``; the handling job
        records ``ekbatan.handler.duration`` and ``ekbatan.event.delivery_lag``, a CONSUMER span
        per handler call and, with ``database_gauges``, the notification gauges read from the
        table at most once per ``gauge_interval`` (default 30 s) per process.
        ``prometheus_registry`` (a ``prometheus_client`` ``CollectorRegistry``): the job's
        metrics are served from it too, read from the process's own counts at each scrape, no
        SDK needed (built even when none is installed; the job's collector stays registered for
        the life of the process). ``action_context``: a handler call's span links to the span of
        the action that recorded its event (``"link"``; ``ActionExecutor(tracing=True)`` keeps
        it), is its child (``"parent"``), or neither (``"off"``). See
        docs/observability-events.md."""
        if not enabled:
            self._telemetry = None
            return self
        return self.telemetry_settings(
            EventPipelineTelemetry(
                metrics=metrics,
                traces=traces,
                database_gauges=database_gauges,
                gauge_interval=gauge_interval,
                meter_provider=meter_provider,
                tracer_provider=tracer_provider,
                prometheus_registry=prometheus_registry,
                action_context=action_context,
            )
        )

    def telemetry_settings(self, settings: EventPipelineTelemetry | None) -> Self:
        """``telemetry(...)``'s options as one value (None: off)."""
        if settings is not None and not isinstance(settings, EventPipelineTelemetry):
            raise TypeError(
                f"telemetry settings must be an EventPipelineTelemetry; got {type(settings).__name__}"
            )
        self._telemetry = settings
        return self

    def apply_settings(self, *_: object) -> NoReturn:
        """Gone: the builders take plain values; ``event_pipeline_jobs`` maps the settings."""
        raise AttributeError(
            f"{type(self).__name__}.apply_settings was removed: the builders take plain values only; write "
            "event_pipeline_jobs(settings.local_event_handler, database_registry=..., event_handler_registry=...) "
            "or call the builder's setters"
        )

    def _options(self) -> dict[str, Any]:
        """The options every pipeline job is built with, the required ones checked."""
        what = type(self).__name__
        if self._database_registry is None:
            raise ValueError(f"{what}: database_registry is required (the DatabaseRegistry of your shards)")
        if self._handlers is None:
            raise ValueError(
                f"{what}: event_handler_registry is required (EventHandlerRegistry.builder()...)"
            )
        if self._clock is None:
            raise ValueError(
                f"{what}: clock is required; pass UtcClock() (from ekbatan.core.outbox) for the wall clock"
            )
        if not callable(getattr(self._clock, "now", None)):
            raise TypeError(f"{what}: clock must have a now() method returning an aware datetime")
        return {
            "name": self._name,
            "poll_delay": self._poll_delay,
            "batch_size": self._batch_size,
            "database_registry": self._database_registry,
            "handlers": self._handlers,
            "clock": self._clock,
            "wakeups": self._wakeups,
            "telemetry": self._telemetry,
        }


class PipelineJob(DistributedJob):
    """A job that runs rounds until shutdown; subclasses provide :meth:`drain_one_round`."""

    def __init__(
        self,
        *,
        name: str,
        poll_delay: timedelta,
        batch_size: int,
        database_registry: DatabaseRegistry,
        handlers: EventHandlerRegistry,
        clock: Clock,
        wakeups: bool,
        wake_channel: Callable[[str], str],
        telemetry: EventPipelineTelemetry | None = None,
    ) -> None:
        self._name = name
        self._poll_delay = poll_delay
        self._batch_size = batch_size
        self._database_registry = database_registry
        self._handlers = handlers
        self._clock = clock
        self._wakeups = wakeups
        self._wake_channel = wake_channel
        self._telemetry_settings = telemetry
        self._wakeup = threading.Event()
        #: set by a round in which some shard filled its batch (more may be waiting there)
        self._filled = False

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(self._poll_delay)

    @property
    def poll_delay(self) -> timedelta:
        return self._poll_delay

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def database_registry(self) -> DatabaseRegistry:
        return self._database_registry

    @property
    def event_handler_registry(self) -> EventHandlerRegistry:
        return self._handlers

    def wake(self) -> None:
        """Start the next round now instead of after the poll delay (a hint; safe from any thread)."""
        self._wakeup.set()

    @abc.abstractmethod
    def drain_one_round(self) -> bool:
        """One batch on every shard, in parallel; True when any shard had work."""

    def _round_begins(self) -> None:
        self._filled = False

    def _shard_batch(self, count: int) -> int:
        """A shard's batch of ``count`` rows is done; returns ``count``."""
        if count >= self._batch_size:
            self._filled = True
        return count

    def execute(self, ctx: JobContext) -> None:
        listeners = None
        if self._wakeups:
            listeners = ShardListeners(
                self._database_registry.transaction_managers(), self._wake_channel, self._wakeup, self._name
            ).start()
        # Listening on every shard, a round that filled no batch is not followed by another at
        # once: anything committed meanwhile has set the wake-up, and the empty round would only
        # compete with the other job's round for the process and the database (measured: it
        # delays an event's handlers by about a millisecond).
        every_shard_notifies = listeners is not None and listeners.covers_every_shard
        again = (lambda: self._filled) if every_shard_notifies else (lambda: True)
        try:
            run_rounds(ctx, self.drain_one_round, self._poll_delay, self._wakeup, again)
        finally:
            if listeners is not None:
                listeners.stop()
            self.close()

    def close(self) -> None:
        """Release the threads this job made (made again when another round runs)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} poll_delay={self._poll_delay} batch_size={self._batch_size}>"
