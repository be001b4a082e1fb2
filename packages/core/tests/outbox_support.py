"""Shared by the outbox tests: a stepping clock and migrated shard databases holding the sample
domain's tables (``testsupport.sample_domain``, which the tests import the domain from)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ekbatan.core import (
    DatabaseRegistry,
    ModelEvent,
    ShardIdentifier,
    TransactionManager,
    eventlog_tables,
)
from testsupport import IsolatedDatabase
from testsupport.eventlog_shards import migrated_shard
from testsupport.sample_domain import Base, Gadget


class SteppingClock:
    """Returns ``start``, then ``start + step``, ... (thread-safe); ``calls`` counts the readings."""

    def __init__(self, start: datetime, step: timedelta = timedelta(seconds=1)) -> None:
        self._lock = threading.Lock()
        self._next = start
        self._step = step
        self.calls = 0

    def now(self) -> datetime:
        with self._lock:
            value = self._next
            self._next += self._step
            self.calls += 1
            return value


T0 = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)


@dataclass
class OutboxShard:
    """One migrated database: business tables, an eventlog of its own, a TransactionManager."""

    shard: ShardIdentifier
    database: IsolatedDatabase
    eventlog: str
    manager: TransactionManager
    _cleanup: list = field(default_factory=list, repr=False)

    @property
    def dialect(self) -> str:
        return self.manager.dialect.value

    @property
    def events(self) -> sa.Table:
        return eventlog_tables(self.manager.dialect, self.eventlog).events

    def event_rows(self, **where: object) -> list[sa.Row]:
        table = self.events
        query = sa.select(table).order_by(table.c.event_type, table.c.id)
        for column, value in where.items():
            query = query.where(table.c[column] == value)
        with self.manager.primary.connect() as connection:
            return list(connection.execute(query))

    def count(self, table: sa.Table | type[Base]) -> int:
        selectable = table.__table__ if isinstance(table, type) else table
        with self.manager.primary.connect() as connection:
            return connection.execute(sa.select(sa.func.count()).select_from(selectable)).scalar_one()

    def gadgets(self) -> list[Gadget]:
        with self.manager.primary.connect() as connection:
            return list(connection.execute(sa.select(Gadget.__table__).order_by(Gadget.name)))


@contextmanager
def outbox_shard(
    dialect: str, shard: ShardIdentifier = ShardIdentifier.DEFAULT, *, scope: str = "schema"
) -> Iterator[OutboxShard]:
    with migrated_shard(dialect, shard, Base.metadata, scope=scope, prefix="ob") as (
        database,
        eventlog,
        manager,
    ):
        yield OutboxShard(shard, database, eventlog, manager)


def registry_of(*shards: OutboxShard, default: ShardIdentifier | None = None) -> DatabaseRegistry:
    return DatabaseRegistry([s.manager for s in shards], default_shard=default)


class OutboxTwinEvent(ModelEvent):
    """test_outbox_events defines another class of this simple name: the guard must refuse it."""

    note: str
