"""The shards whose event pipeline the operator view shows and re-drives: for each, its name,
dialect, eventlog schema and its primary's engine, plus the handlers to list even before their
first notification.

Plain values, so that anything that knows the shards can give them: an :class:`EkbatanRuntime`
(:func:`eventlog_shards_of`), or ``ekbatan ui``, which opens the configuration's pools itself and
builds no runtime (so no scheduler object exists in its process).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from ekbatan.core import DialectName

if TYPE_CHECKING:
    from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["EventlogShard", "EventlogShards", "eventlog_shards_of"]

#: the name of a shard registered without an identifier (a registry built by hand)
UNNAMED_SHARD = "default"


@dataclass(frozen=True)
class EventlogShard:
    """One shard: read and re-driven on its primary (where the handling job writes)."""

    name: str
    dialect: DialectName
    eventlog_schema: str
    engine: sa.Engine = field(repr=False)


@dataclass(frozen=True)
class EventlogShards:
    """Every shard, in configuration order, and the handlers the application defines."""

    shards: tuple[EventlogShard, ...]
    #: listed with zero counts on a shard where they have no notification yet
    handler_names: tuple[str, ...] = ()


def eventlog_shards_of(runtime: EkbatanRuntime) -> EventlogShards:
    """A runtime's shards (its database registry's, named as its logs name them) and handlers."""
    registry = runtime.database_registry
    return EventlogShards(
        tuple(
            EventlogShard(
                registry.shard_name(manager.shard) if manager.shard is not None else UNNAMED_SHARD,
                manager.dialect,
                manager.eventlog_schema,
                manager.primary.engine,
            )
            for manager in registry.transaction_managers()
        ),
        runtime.event_handler_registry.handler_names(),
    )
