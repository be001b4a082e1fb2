"""``EventFanoutJob``: turns each undelivered outbox event into one notification per handler.

Per shard and round, in one transaction on the primary: pick the oldest undelivered events of
the types that have a handler, insert one ``event_notifications`` row per (event, subscribed
handler) — skipping pairs that already exist — and flip those events to ``delivered``. The
database copies the rows itself (``fanout_sql``). A crash before the commit leaves nothing
behind; an overlapping revived run only meets the unique key. Events of a type nobody handles
stay undelivered, to be fanned out once a handler for them is deployed. With telemetry on, each
event fanned out counts once in ``ekbatan.events.recorded``, after its round committed.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ekbatan.core.outbox import events_channel, utc_now
from ekbatan.core.persistence import DialectName, TransactionManager
from ekbatan.core.sharding import ShardIdentifier
from ekbatan.local_event_handler.connections import pipeline_connection
from ekbatan.local_event_handler.event_type_checks import (
    unrecorded_subscriptions,
    warn_unrecorded_subscriptions,
)
from ekbatan.local_event_handler.fanout_sql import FanoutStatements, fanout_statements
from ekbatan.local_event_handler.pipeline_job import PipelineJob, PipelineJobBuilder
from ekbatan.local_event_handler.shard_rounds import ShardRounds

if TYPE_CHECKING:
    from ekbatan.local_event_handler._telemetry.metrics import FanoutMetrics

log = logging.getLogger("ekbatan.local_event_handler")

DEFAULT_FANOUT_NAME = "ekbatan-event-fanout"
DEFAULT_FANOUT_BATCH_SIZE = 200


class EventFanoutJobBuilder(PipelineJobBuilder):
    def __init__(self) -> None:
        super().__init__(DEFAULT_FANOUT_NAME, DEFAULT_FANOUT_BATCH_SIZE)
        self._on_fanned_out: list[PipelineJob] = []

    def wake_after_fanout(self, job: PipelineJob) -> EventFanoutJobBuilder:
        """Wake ``job`` (the handling job of this process) whenever a round created notifications."""
        self._on_fanned_out.append(job)
        return self

    def build(self) -> EventFanoutJob:
        return EventFanoutJob(wake_after=tuple(self._on_fanned_out), **self._options())


class EventFanoutJob(PipelineJob):
    """Build with ``EventFanoutJob.builder()...build()``; register with a ``JobRegistry``."""

    @staticmethod
    def builder() -> EventFanoutJobBuilder:
        return EventFanoutJobBuilder()

    def __init__(self, *, wake_after: tuple[PipelineJob, ...] = (), **options: Any) -> None:
        super().__init__(wake_channel=events_channel, **options)
        self._wake_after = list(wake_after)
        self._rounds = ShardRounds("fan-out", f"{self._name}-shard")
        self._statement_cache: dict[tuple[DialectName, str], FanoutStatements] = {}
        self._counts = threading.Lock()
        # shards whose eventlog was looked at for handlers of event types nobody records: once
        # per shard and process, at the first round there
        self._subscriptions_checked: set[ShardIdentifier | None] = set()
        self._metrics: FanoutMetrics | None = None
        if self._telemetry_settings is not None:
            from ekbatan.local_event_handler._telemetry.wiring import fanout_metrics

            self._metrics = fanout_metrics(self._telemetry_settings)
        #: events fanned out and notifications written by this job object
        self.fanned_out = 0
        self.notifications_created = 0

    def wake_after_fanout(self, job: PipelineJob) -> None:
        self._wake_after.append(job)

    def drain_one_round(self) -> bool:
        self._round_begins()
        fanned = self._rounds.run(self._database_registry.transaction_managers(), self._fan_out_shard)
        if fanned:
            for job in self._wake_after:
                job.wake()
        return fanned > 0

    def _fan_out_shard(self, manager: TransactionManager) -> int:
        if not self._handlers:
            return 0
        if manager.shard not in self._subscriptions_checked:
            self._check_subscriptions(manager)
        statements = self._statements(manager)
        now = utc_now(self._clock)
        with pipeline_connection(manager.primary) as connection, connection.begin():
            # on PostgreSQL the statement itself also notifies the handling job's listeners
            events, notifications, event_types = statements.run(connection, self._batch_size, now)
        if events and self._metrics is not None:
            self._metrics.recorded(event_types)  # committed: each event counts once
        if events:
            with self._counts:
                self.fanned_out += events
                self.notifications_created += notifications
            log.debug(
                "fanned out %d event(s) into %d notification(s) on shard %s",
                events,
                notifications,
                manager.shard,
            )
        return self._shard_batch(events)

    def _check_subscriptions(self, manager: TransactionManager) -> None:
        assert self._handlers is not None
        try:
            # a plain connection: the pipeline's index-only PostgreSQL settings suit its own
            # statements, not these existence reads
            with manager.primary.connect() as connection:
                missing = unrecorded_subscriptions(
                    connection, manager.dialect, manager.eventlog_schema, self._handlers
                )
        except Exception as error:
            # the round that follows meets the same trouble and reports it; try again next round
            log.debug("could not check the handlers' event types on shard %s: %s", manager.shard, error)
            return
        self._subscriptions_checked.add(manager.shard)
        if missing:
            warn_unrecorded_subscriptions(missing, f"{manager.eventlog_schema} on shard {manager.shard}")

    def _statements(self, manager: TransactionManager) -> FanoutStatements:
        key = (manager.dialect, manager.eventlog_schema)
        statements = self._statement_cache.get(key)
        if statements is None:
            subscriptions = [
                (event_type, handler_name)
                for event_type in self._handlers.handled_event_types()
                for handler_name in self._handlers.subscribers_for(event_type)
            ]
            statements = fanout_statements(manager.dialect, manager.eventlog_schema, subscriptions)
            self._statement_cache[key] = statements
        return statements

    def close(self) -> None:
        self._rounds.close()
