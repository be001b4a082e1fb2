"""Shared by the local event handler's tests: migrated shards holding the sample domain's tables
(``testsupport.sample_domain``, which the tests import the domain from), recording handlers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.core import (
    ActionExecutor,
    DatabaseRegistry,
    ModelEvent,
    ShardIdentifier,
    TransactionManager,
    eventlog_tables,
)
from ekbatan.local_event_handler import (
    EventEnvelope,
    EventHandler,
    notifications_migrations,
    notifications_table,
)
from testsupport import IsolatedDatabase
from testsupport.eventlog_shards import migrated_shard
from testsupport.sample_domain import Base, GadgetCreated

NAMESPACE = "test.local_event_handler"
SHARDS = (ShardIdentifier(0, 0), ShardIdentifier(1, 0))


class RecordingHandler(EventHandler[Any]):
    """Records every envelope; ``behaviour(envelope, call_number)`` may raise to fail a call."""

    def __init__(
        self,
        name: str,
        event_class: type[ModelEvent] = GadgetCreated,
        *,
        aliases: tuple[str, ...] = (),
        behaviour: Callable[[EventEnvelope[Any], int], None] | None = None,
    ) -> None:
        self._name = name
        self._event_class = event_class
        self._aliases = aliases
        self._behaviour = behaviour
        self._lock = threading.Lock()
        self.received: list[EventEnvelope[Any]] = []

    def name(self) -> str:
        return self._name

    def aliases(self) -> tuple[str, ...]:
        return self._aliases

    def event_type(self) -> type[ModelEvent]:
        return self._event_class

    def handle(self, envelope: EventEnvelope[Any]) -> None:
        with self._lock:
            self.received.append(envelope)
            call = len(self.received)
        if self._behaviour is not None:
            self._behaviour(envelope, call)

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.received)


class SettableClock:
    """A clock the test moves by hand (thread-safe)."""

    def __init__(self, start: datetime) -> None:
        self._lock = threading.Lock()
        self._now = start

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, by: timedelta) -> None:
        with self._lock:
            self._now += by


class OffsetClock:
    """The wall clock moved by a fixed offset."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class PipelineShard:
    shard: ShardIdentifier
    database: IsolatedDatabase
    eventlog: str
    manager: TransactionManager

    def _tables(self) -> Any:
        return eventlog_tables(self.manager.dialect, self.eventlog)

    def notifications(self, **where: object) -> list[sa.Row[Any]]:
        table = notifications_table(self.manager.dialect, self.eventlog)
        query = sa.select(table).order_by(table.c.created_date, table.c.handler_name, table.c.id)
        for column, value in where.items():
            query = query.where(table.c[column] == value)
        with self.manager.primary.connect() as connection:
            return list(connection.execute(query))

    def count_notifications(self, state: str | None = None) -> int:
        return len(self.notifications(**({"state": state} if state else {})))

    def events(self, *, delivered: bool | None = None) -> list[sa.Row[Any]]:
        table = self._tables().events
        query = sa.select(table).where(table.c.event_type.is_not(None))
        if delivered is not None:
            query = query.where(table.c.delivered == delivered)
        with self.manager.primary.connect() as connection:
            return list(connection.execute(query))

    def rows(self, model: type[Base]) -> list[sa.Row[Any]]:
        with self.manager.primary.connect() as connection:
            return list(connection.execute(sa.select(model.__table__)))

    def execute(self, statement: Any, params: Any = None) -> None:
        with self.manager.primary.begin() as connection:
            connection.execute(statement, params)


@contextmanager
def pipeline_shard(dialect: str, shard: ShardIdentifier, *, scope: str) -> Iterator[PipelineShard]:
    with migrated_shard(
        dialect,
        shard,
        Base.metadata,
        scope=scope,
        prefix="leh",
        pool_size=8,
        contributions=notifications_migrations(),
    ) as created:
        database, eventlog, manager = created
        yield PipelineShard(shard, database, eventlog, manager)


@contextmanager
def pipeline_shards(dialect: str, count: int) -> Iterator[list[PipelineShard]]:
    """``count`` migrated shards, (0,0) first; several shards are separate databases."""
    scope = "database" if count > 1 else "schema"
    with ExitStack() as stack:
        yield [stack.enter_context(pipeline_shard(dialect, SHARDS[i], scope=scope)) for i in range(count)]


def registry_of(shards: list[PipelineShard]) -> DatabaseRegistry:
    return DatabaseRegistry([s.manager for s in shards], default_shard=shards[0].shard)


def executor_for(registry: DatabaseRegistry) -> ActionExecutor:
    return ActionExecutor(registry, namespace=NAMESPACE)
