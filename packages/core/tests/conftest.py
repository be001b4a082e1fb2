"""Fixtures of core's tests: migrated shard databases for the outbox tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from outbox_support import OutboxShard, outbox_shard

from ekbatan.core import ShardIdentifier

GLOBAL = ShardIdentifier(0, 0)
MEXICO = ShardIdentifier(1, 0)


@pytest.fixture
def shard_db(dialect: str) -> Iterator[OutboxShard]:
    """One migrated database (shard (0,0)) with the gadget/memo tables and its own eventlog."""
    with outbox_shard(dialect, GLOBAL) as db:
        yield db


@pytest.fixture
def two_shard_dbs(dialect: str) -> Iterator[tuple[OutboxShard, OutboxShard]]:
    """Two separate databases: shard (0,0) (the default) and shard (1,0)."""
    with (
        outbox_shard(dialect, GLOBAL, scope="database") as first,
        outbox_shard(dialect, MEXICO, scope="database") as second,
    ):
        yield first, second
