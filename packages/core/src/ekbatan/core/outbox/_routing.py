"""Which shard a planned change belongs to, and which model an ORM instance is.

The rule, in order:

1. an explicit ``shard=`` given when the change was planned;
2. for an ORM instance already loaded through one of the plan's sessions, that session's shard;
3. the first primary-key value that is a :class:`~ekbatan.core.sharding.ShardedUUID` (UUID v7
   carrying shard bits) — for an event, its ``model_id`` when that is such a UUID;
4. the default shard.

The result then goes through ``DatabaseRegistry.effective_shard``, so a shard that is encoded
in an id but not registered (not deployed yet) lands on the default shard.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import NoInspectionAvailable
from sqlalchemy.orm import Mapper

from ekbatan.core.sharding._shard_identifier import ShardIdentifier
from ekbatan.core.sharding._sharded_uuid import ShardedUUID


def orm_mapper(instance: object) -> Mapper[Any] | None:
    """The ORM mapper of ``instance``, or ``None`` when it is not an ORM-mapped object."""
    try:
        state = sa.inspect(instance)
    except NoInspectionAvailable:
        return None
    mapper = getattr(state, "mapper", None)
    return mapper if isinstance(mapper, Mapper) and not isinstance(instance, type) else None


def primary_key_values(instance: object) -> tuple[Any, ...]:
    mapper = orm_mapper(instance)
    if mapper is None:
        return (getattr(instance, "id", None),)
    return tuple(mapper.primary_key_from_instance(instance))


def instance_identity(instance: object) -> tuple[str | None, str]:
    """``(model_id, model_name)``: the primary key as text (``None`` while unset) and the class name.

    A composite key is joined with commas. Objects that are not ORM-mapped use their ``id``.
    """
    values = primary_key_values(instance)
    model_name = type(instance).__name__
    if any(v is None for v in values):
        return None, model_name
    return ",".join(str(v) for v in values), model_name


def shard_from_value(value: object) -> ShardIdentifier | None:
    """The shard carried by a ``ShardedUUID`` (a ``uuid.UUID`` or its text), else ``None``."""
    if isinstance(value, str):
        try:
            value = uuid.UUID(value)
        except ValueError:
            return None
    if isinstance(value, uuid.UUID):
        return ShardedUUID.shard_of(value)
    return None


def instance_shard(instance: object) -> ShardIdentifier | None:
    """The shard encoded in the first sharded UUID among ``instance``'s primary-key values."""
    for value in primary_key_values(instance):
        shard = shard_from_value(value)
        if shard is not None:
            return shard
    return None
