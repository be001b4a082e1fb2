"""The overview's event pipeline: per shard, per handler, its pending, failed and expired
notifications and how old its oldest open one is — read as ``ekbatan events status`` reads it,
on each shard's primary. The shards are an :class:`EkbatanRuntime`'s or those ``ekbatan ui``
opened (:mod:`.eventlog_shards`).

A shard whose eventlog tables are not there (never migrated) is left out; a bare
``SchedulerClient`` given no shards has none, so the section is not shown at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ekbatan.integrations.operator.eventlog_shards import EventlogShards
from ekbatan.integrations.pipeline_status import EventlogStatus, read_eventlog_status

__all__ = ["ShardPipeline", "read_pipeline"]

log = logging.getLogger("ekbatan.integrations.operator")


@dataclass(frozen=True)
class ShardPipeline:
    shard: str
    eventlog_schema: str
    status: EventlogStatus
    #: when it was read: the page shows ages against it
    read_at: datetime


def read_pipeline(eventlog: EventlogShards, now: datetime) -> list[ShardPipeline]:
    """Every shard with eventlog tables, in configuration order; the handlers the source
    names are listed even before their first notification."""
    shards = []
    for shard in eventlog.shards:
        try:
            with shard.engine.connect() as connection:
                status = read_eventlog_status(
                    connection, shard.dialect, shard.eventlog_schema, eventlog.handler_names
                )
        except sa.exc.DBAPIError as error:
            # no eventlog tables on this shard (or it does not answer): the page still renders
            log.debug("event pipeline of shard %s not read: %s", shard.name, error)
            continue
        shards.append(ShardPipeline(shard.name, shard.eventlog_schema, status, now))
    return shards
