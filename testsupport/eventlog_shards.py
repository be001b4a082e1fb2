"""A migrated shard database for outbox tests: the eventlog tables (core's, and whichever other
``contributions`` the test passes, such as the local event handler's ``event_notifications``),
the test's own tables and a ``TransactionManager``, all dropped afterwards.

Imported by name (``from testsupport.eventlog_shards import migrated_shard``), not from the
package, so the engine's tests never load ``ekbatan.core``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Literal

import sqlalchemy as sa

from ekbatan.core import ConnectionProvider, ShardIdentifier, TransactionManager, migrate
from ekbatan.core.migrations import Migration, MigrationTarget, core_migrations
from testsupport.databases import IsolatedDatabase, create_isolated_database, server_url


@contextmanager
def migrated_shard(
    dialect: str,
    shard: ShardIdentifier,
    metadata: sa.MetaData,
    *,
    scope: Literal["schema", "database"] = "schema",
    prefix: str = "ob",
    pool_size: int = 4,
    contributions: Iterable[Migration] = (),
) -> Iterator[tuple[IsolatedDatabase, str, TransactionManager]]:
    """A fresh database with an eventlog of a unique name, migrated with core's migrations and
    ``contributions``, and ``metadata``'s tables."""
    database = create_isolated_database(dialect, scope=scope, prefix=prefix)
    eventlog = f"el_{uuid.uuid4().hex[:10]}"
    try:
        migrate(
            [MigrationTarget(str(shard), database.url, eventlog)],
            contributions=[*core_migrations(), *contributions],
        )
        provider = ConnectionProvider.from_url(database.url, maximum_pool_size=pool_size)
        metadata.create_all(provider.engine)
        manager = TransactionManager(provider, shard=shard, eventlog_schema=eventlog)
        try:
            yield database, eventlog, manager
        finally:
            manager.close()
    finally:
        database.drop()
        drop_eventlog(dialect, eventlog)


def drop_eventlog(dialect: str, eventlog: str) -> None:
    # SQLite keeps the eventlog in the (already removed) file; a PostgreSQL "database" scope
    # drops the schema with its database, but the cheap "schema" scope shares the test database.
    if dialect == "sqlite":
        return
    admin = sa.create_engine(server_url(dialect), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as connection:
            if dialect == "postgres":
                connection.exec_driver_sql(f"DROP SCHEMA IF EXISTS {eventlog} CASCADE")
            else:
                connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {eventlog}")
    finally:
        admin.dispose()
