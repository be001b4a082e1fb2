"""The connections the pipeline reads and writes through, and why they differ from the application's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from ekbatan.core.persistence import ConnectionProvider, Dialect

_MYSQL_FAMILY = (Dialect.MARIADB, Dialect.MYSQL)


@contextmanager
def pipeline_connection(provider: ConnectionProvider, *, writes: bool = True) -> Iterator[sa.Connection]:
    """A pooled connection for the pipeline's own reads and writes.

    * MySQL/MariaDB: READ COMMITTED. InnoDB's default REPEATABLE READ makes
      ``UPDATE … WHERE id IN (…)`` take next-key locks on the gaps between random UUIDs; those
      gaps are where the application's actions insert new events, so each side waited on the
      other and one of them — often the application's action — died as a deadlock victim. READ
      COMMITTED locks only the rows changed; nothing here relies on a repeatable snapshot.
    * PostgreSQL, for writes: ``synchronous_commit = off`` while the pipeline holds the
      connection. Every write here can be repeated safely — a lost fan-out is fanned out again
      (the unique key absorbs it), a lost outcome means one more delivery, which at-least-once
      delivery allows — so the pipeline need not wait for its commits to reach the disk. The
      application's own transactions, handlers' included, keep the server's setting.
    * SQLite has neither; it locks the whole file anyway.
    """
    relaxed = writes and provider.dialect is Dialect.POSTGRESQL
    connection = provider.connect()
    try:
        if provider.dialect in _MYSQL_FAMILY:
            connection.execution_options(isolation_level="READ COMMITTED")
        elif relaxed:
            connection.exec_driver_sql("SET synchronous_commit TO OFF")
            connection.commit()
        yield connection
    finally:
        if relaxed and not connection.invalidated:
            try:
                connection.rollback()
                connection.exec_driver_sql("RESET synchronous_commit")
                connection.commit()
            except Exception:
                # never hand a relaxed session back to the pool, nor hide the error that got here
                connection.invalidate()
        connection.close()
