"""Gauges read from ``event_notifications``: how many notifications wait per handler and state,
and how long the oldest has waited.

They describe the whole cluster's tables, so every process reports the same values: aggregate
them with ``max``, not ``sum``. Read when the metrics are collected, at most once per interval
per process (a collection in between reports the last read), over the open rows only (through
the index of open rows: the handled ones, which stay in the table, are never scanned). A read
that fails is logged once per streak and reports nothing until one succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.core.outbox import Clock, utc_now
from ekbatan.core.sharding import DatabaseRegistry
from ekbatan.distributed_jobs.scheduler import Described, GaugeReading
from ekbatan.local_event_handler import handling_sql as sql
from ekbatan.local_event_handler._telemetry.metrics import NOTIFICATIONS, OLDEST_PENDING_AGE
from ekbatan.local_event_handler.connections import pipeline_connection
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry
from ekbatan.local_event_handler.states import OPEN_STATES

log = logging.getLogger("ekbatan.local_event_handler.telemetry")

#: the gauges, in the order :meth:`NotificationGauges.reading` returns them
GAUGES = (NOTIFICATIONS, OLDEST_PENDING_AGE)


@dataclass
class NotificationCounts:
    """One read, over every shard."""

    #: (handler, state in lower case) → open notifications
    by_state: dict[tuple[str, str], int] = field(default_factory=dict)
    #: handler → seconds since the event of its oldest open notification was recorded
    oldest_age: dict[str, float] = field(default_factory=dict)


class NotificationGauges:
    def __init__(
        self,
        database_registry: DatabaseRegistry,
        handlers: EventHandlerRegistry,
        clock: Clock,
        interval: timedelta,
    ) -> None:
        self.database_registry = database_registry
        self.handlers = handlers
        self.clock = clock
        self.interval = interval.total_seconds()
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._counts: NotificationCounts | None = None
        self._failing = False
        self._attributes: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}

    def register(self, meter: Any) -> None:
        """Report the gauges through OpenTelemetry observable gauges of ``meter``."""
        for described in GAUGES:

            def observe(options: Any, described: Described = described) -> Iterable[Any]:
                from opentelemetry.metrics import Observation

                return [
                    Observation(value, self._attrs(described, key))
                    for gauge, values in self.reading()
                    if gauge is described
                    for key, value in values.items()
                ]

            meter.create_observable_gauge(
                described.name, callbacks=[observe], unit=described.unit, description=described.description
            )

    def reading(self) -> GaugeReading:
        """Both gauges' values by key tuple (what a Prometheus collector reads); nothing while
        reads fail."""
        counts = self.counts()
        if counts is None:
            return []
        by_state: dict[tuple[str, ...], float] = {key: n for key, n in counts.by_state.items()}
        ages: dict[tuple[str, ...], float] = {(handler,): age for handler, age in counts.oldest_age.items()}
        return [(NOTIFICATIONS, by_state), (OLDEST_PENDING_AGE, ages)]

    def _attrs(self, described: Described, key: tuple[str, ...]) -> dict[str, str]:
        attributes = self._attributes.get((described.name, key))
        if attributes is None:
            attributes = self._attributes[(described.name, key)] = described.attributes(key)
        return attributes

    def counts(self) -> NotificationCounts | None:
        """The last read, read again when it is older than the interval."""
        with self._lock:  # both gauges of one collection: one read
            if self._read_at is not None and time.monotonic() - self._read_at < self.interval:
                return self._counts
            try:
                self._counts = self._read()
            except Exception as error:
                if not self._failing:
                    log.warning(
                        "reading the notification gauges failed (%s: %s); they report nothing until a "
                        "read succeeds (retried at the next collection after %.0f s)",
                        type(error).__name__,
                        error,
                        self.interval,
                    )
                self._failing = True
                self._counts = None
            else:
                if self._failing:
                    log.info("reading the notification gauges works again")
                self._failing = False
            self._read_at = time.monotonic()
            return self._counts

    def _read(self) -> NotificationCounts:
        now = utc_now(self.clock)
        counts = NotificationCounts()
        # every handler reports, 0 when nothing of it waits (not a missing series)
        for handler in self.handlers.handler_names():
            for state in OPEN_STATES:
                counts.by_state[(handler, state.lower())] = 0
            counts.oldest_age[handler] = 0.0
        oldest: dict[str, datetime] = {}
        for manager in self.database_registry.transaction_managers():
            n = sql.tables(manager.dialect, manager.eventlog_schema).event_notifications
            query = (
                sa.select(n.c.handler_name, n.c.state, sa.func.count(), sa.func.min(n.c.event_date))
                .where(n.c.state.in_(OPEN_STATES))
                .group_by(n.c.handler_name, n.c.state)
            )
            with pipeline_connection(manager.primary, writes=False) as connection:
                rows = connection.execute(query).all()
            for handler, state, count, first in rows:
                key = (handler, str(state).lower())
                counts.by_state[key] = counts.by_state.get(key, 0) + int(count)
                if first is not None and (handler not in oldest or first < oldest[handler]):
                    oldest[handler] = first
        for handler, first in oldest.items():
            counts.oldest_age[handler] = max((now - first).total_seconds(), 0.0)
        return counts
