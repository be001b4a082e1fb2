"""``EventFanoutJob``: turns each undelivered outbox event into one notification per handler.

Per shard and round: read the oldest undelivered events of the types that have a handler
(from the shard's replica when it has one), then in one transaction on the primary insert one
``event_notifications`` row per (event, subscribed handler) — skipping pairs that already
exist — and flip those events to ``delivered``. A crash before the commit leaves nothing
behind; a repeated read (replica lag, an overlapping revived run) only meets the unique key.
Events of a type nobody handles stay undelivered, to be fanned out once a handler for them is
deployed.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from ekbatan.core.config import EkbatanSettings, LocalEventHandlerConfig
from ekbatan.core.outbox.clock import utc_now
from ekbatan.core.outbox.wakeups import events_channel, notifications_channel, notify
from ekbatan.core.persistence import Dialect, TransactionManager
from ekbatan.local_event_handler import sql
from ekbatan.local_event_handler.connections import pipeline_connection
from ekbatan.local_event_handler.pipeline_job import PipelineJob, PipelineJobBuilder
from ekbatan.local_event_handler.shard_rounds import ShardRounds
from ekbatan.local_event_handler.states import NotificationState

log = logging.getLogger("ekbatan.local_event_handler")

DEFAULT_FANOUT_NAME = "ekbatan-event-fanout"
DEFAULT_FANOUT_BATCH_SIZE = 200


class EventFanoutJobBuilder(PipelineJobBuilder):
    def __init__(self) -> None:
        super().__init__(DEFAULT_FANOUT_NAME, DEFAULT_FANOUT_BATCH_SIZE)
        self._on_fanned_out: list[PipelineJob] = []

    def apply_settings(self, settings: LocalEventHandlerConfig | EkbatanSettings) -> EventFanoutJobBuilder:
        """Apply ``fanout-poll-delay`` and ``fanout-batch-size`` where they are set; absent keys
        leave the builder as it is."""
        config = settings.local_event_handler if isinstance(settings, EkbatanSettings) else settings
        if config.fanout_poll_delay is not None:
            self.poll_delay(config.fanout_poll_delay)
        if config.fanout_batch_size is not None:
            self.batch_size(config.fanout_batch_size)
        return self

    def wake_after_fanout(self, job: PipelineJob) -> EventFanoutJobBuilder:
        """Wake ``job`` (the handling job of this process) whenever a round created notifications."""
        self._on_fanned_out.append(job)
        return self

    def build(self) -> EventFanoutJob:
        registry, handlers, clock = self._required()
        return EventFanoutJob(
            name=self._name,
            poll_delay=self._poll_delay,
            batch_size=self._batch_size,
            database_registry=registry,
            handlers=handlers,
            clock=clock,
            wakeups=self._wakeups,
            wake_after=tuple(self._on_fanned_out),
        )


class EventFanoutJob(PipelineJob):
    """Build with ``EventFanoutJob.builder()...build()``; register with a ``JobRegistry``."""

    @staticmethod
    def builder() -> EventFanoutJobBuilder:
        return EventFanoutJobBuilder()

    def __init__(self, *, wake_after: tuple[PipelineJob, ...] = (), **options: Any) -> None:
        super().__init__(wake_channel=events_channel, **options)
        self._wake_after = list(wake_after)
        self._rounds = ShardRounds("fan-out", f"{self._name}-shard")
        self._counts = threading.Lock()
        #: events fanned out and notifications written by this job object (over-counted when a
        #: replica lags: a re-read event's notifications are skipped by the unique key)
        self.fanned_out = 0
        self.notifications_created = 0

    def wake_after_fanout(self, job: PipelineJob) -> None:
        self._wake_after.append(job)

    def drain_one_round(self) -> bool:
        fanned = self._rounds.run(self._database_registry.transaction_managers(), self._fan_out_shard)
        if fanned:
            for job in self._wake_after:
                job.wake()
        return fanned > 0

    def _fan_out_shard(self, manager: TransactionManager) -> int:
        event_types = self._handlers.handled_event_types()
        if not event_types:
            return 0
        dialect = manager.dialect
        t = sql.tables(dialect, manager.eventlog_schema)
        with pipeline_connection(manager.secondary, writes=False) as connection:
            events = connection.execute(sql.undelivered_events(t, event_types, self._batch_size)).all()
        if not events:
            return 0
        now = utc_now(self._clock)
        notifications: list[dict[str, Any]] = []
        for event in events:
            copied = {name: getattr(event, name) for name in sql.COPIED_COLUMNS}
            for handler_name in self._handlers.subscribers_for(event.event_type):
                notifications.append(
                    {
                        **copied,
                        "id": uuid.uuid4(),
                        "event_id": event.id,
                        "handler_name": handler_name,
                        "state": NotificationState.PENDING.value,
                        "attempts": 0,
                        # due from the moment the event happened: an old backlog drains oldest first
                        "next_retry_at": event.event_date,
                        "created_date": now,
                        "updated_date": now,
                    }
                )
        with pipeline_connection(manager.primary) as connection, connection.begin():
            if notifications:
                sql.insert_rows(connection, sql.insert_notifications(t, dialect), notifications)
                if dialect is Dialect.POSTGRESQL:
                    notify(connection, notifications_channel(manager.eventlog_schema))
            connection.execute(sql.mark_delivered(t, [event.id for event in events]))
        with self._counts:
            self.fanned_out += len(events)
            self.notifications_created += len(notifications)
        log.debug(
            "fanned out %d event(s) into %d notification(s) on shard %s",
            len(events),
            len(notifications),
            manager.shard,
        )
        return len(events)

    def close(self) -> None:
        self._rounds.close()
