"""``TransactionManager``: one shard's primary (and replica) pools and its current transaction.

The current transaction is bound in a ``ContextVar``, so it follows the thread or asyncio task
that opened it and is invisible to every other one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from ekbatan.core.persistence._connection_provider import ConnectionProvider
from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier

if TYPE_CHECKING:
    from ekbatan.core.sharding._shard_identifier import ShardIdentifier

log = logging.getLogger("ekbatan.core.persistence.transaction_manager")
T = TypeVar("T")

_NOTHING_BOUND: Mapping[int, sa.Connection] = MappingProxyType({})
_bound_transactions: ContextVar[Mapping[int, sa.Connection]] = ContextVar(
    "ekbatan_bound_transactions", default=_NOTHING_BOUND
)


class TransactionManager:
    """Transactions on one shard's primary; reads on its replica (the primary when there is none).

    Transactions do not nest: ``transaction()`` inside ``transaction()`` opens a second
    connection with an independent transaction, and the inner one is "current" until it ends.
    """

    def __init__(
        self,
        primary: ConnectionProvider,
        secondary: ConnectionProvider | None = None,
        *,
        shard: ShardIdentifier | None = None,
        eventlog_schema: str = "eventlog",
    ) -> None:
        self._primary = primary
        self._secondary = secondary if secondary is not None else primary
        self._shard = shard
        self._eventlog_schema = validate_sql_identifier(eventlog_schema, "eventlog schema")

    @property
    def primary(self) -> ConnectionProvider:
        return self._primary

    @property
    def secondary(self) -> ConnectionProvider:
        """The replica provider; the very same object as ``primary`` when no replica is configured."""
        return self._secondary

    @property
    def dialect(self) -> DialectName:
        return self._primary.dialect

    @property
    def shard(self) -> ShardIdentifier | None:
        return self._shard

    @property
    def eventlog_schema(self) -> str:
        """Where this shard's ``events`` tables live (schema, database or SQLite table prefix)."""
        return self._eventlog_schema

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A new primary connection in a transaction: committed on normal exit, rolled back on error."""
        connection = self._primary.connect()
        try:
            transaction = connection.begin()
            token = _bound_transactions.set(
                MappingProxyType({**_bound_transactions.get(), id(self): connection})
            )
            try:
                yield connection
            except BaseException as error:
                log.warning("rolling back transaction on %s after %s", self._label(), type(error).__name__)
                try:
                    # A Session joined to this connection (the outbox's) rolls the transaction
                    # back itself when its flush fails; rolling it back again only warns, and
                    # under -W error that warning would evict a healthy connection.
                    current = connection.get_transaction()
                    if current is not None:
                        current.rollback()
                except Exception:
                    # Never hand back a connection whose transaction may still be open.
                    self._primary.evict(connection)
                raise
            else:
                try:
                    transaction.commit()
                except BaseException:
                    if transaction.is_active:
                        self._primary.evict(connection)
                    raise
            finally:
                _bound_transactions.reset(token)
        finally:
            connection.close()

    def run_in_transaction(self, work: Callable[[sa.Connection], T]) -> T:
        with self.transaction() as connection:
            return work(connection)

    def current_connection(self) -> sa.Connection | None:
        """The connection of the transaction this thread/task has open here, if any."""
        return _bound_transactions.get().get(id(self))

    @contextmanager
    def read_only(self) -> Iterator[sa.Connection]:
        """A connection on the replica (or the primary when there is none); nothing is committed."""
        with self._secondary.connect() as connection:
            yield connection

    def close(self) -> None:
        """Close the primary, and the replica only if it is a different pool."""
        try:
            self._primary.close()
        finally:
            if self._secondary is not self._primary:
                self._secondary.close()

    def _label(self) -> str:
        return f"shard {self._shard}" if self._shard is not None else self._primary.url

    def __repr__(self) -> str:
        return f"<TransactionManager {self._label()} {self.dialect.value}>"
