"""The overview's event pipeline: per shard of an :class:`EkbatanRuntime`, per handler, its
pending, failed and expired notifications and how old its oldest open one is — read as
``ekbatan events status`` reads it, on each shard's primary.

A shard whose eventlog tables are not there (never migrated) is left out; a bare
``SchedulerClient`` has no shards, so the section is not shown at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ekbatan.integrations.pipeline_status import EventlogStatus, read_eventlog_status
from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["ShardPipeline", "read_pipeline"]

log = logging.getLogger("ekbatan.integrations.operator")


@dataclass(frozen=True)
class ShardPipeline:
    shard: str
    eventlog_schema: str
    status: EventlogStatus
    #: when it was read: the page shows ages against it
    read_at: datetime


def read_pipeline(runtime: EkbatanRuntime, now: datetime) -> list[ShardPipeline]:
    """Every shard with eventlog tables, in configuration order; the runtime's handlers are
    listed even before their first notification."""
    registry = runtime.database_registry
    handler_names = runtime.event_handler_registry.handler_names()
    shards = []
    for manager in registry.transaction_managers():
        name = registry.shard_name(manager.shard) if manager.shard is not None else "default"
        try:
            with manager.primary.connect() as connection:
                status = read_eventlog_status(
                    connection, manager.dialect, manager.eventlog_schema, handler_names
                )
        except sa.exc.DBAPIError as error:
            # no eventlog tables on this shard (or it does not answer): the page still renders
            log.debug("event pipeline of shard %s not read: %s", name, error)
            continue
        shards.append(ShardPipeline(name, manager.eventlog_schema, status, now))
    return shards
