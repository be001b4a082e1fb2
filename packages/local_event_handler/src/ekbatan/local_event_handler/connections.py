"""The connections the pipeline reads and writes through, and why they differ from the application's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from ekbatan.core.persistence import ConnectionProvider, DialectName

_MYSQL_FAMILY = (DialectName.MARIADB, DialectName.MYSQL)


#: the pipeline's statements read a few rows through an index in index order (the oldest due
#: notifications, the oldest undelivered events, rows by id). Right after a burst, before the
#: server has analyzed the tables, PostgreSQL's planner believes them nearly empty and chooses
#: bitmap or sequential scans that read the whole backlog and sort it — a round grew from 3.5 to
#: 25 ms with 30,000 open notifications. Steering it to the index keeps each round's cost flat.
_POSTGRESQL_READS = {"enable_seqscan": "off", "enable_bitmapscan": "off"}
#: every write here can be repeated safely, so the pipeline need not wait for the disk
_POSTGRESQL_WRITES = {"synchronous_commit": "off"}


@contextmanager
def pipeline_connection(provider: ConnectionProvider, *, writes: bool = True) -> Iterator[sa.Connection]:
    """A pooled connection for the pipeline's own reads and writes.

    * MySQL/MariaDB: READ COMMITTED. InnoDB's default REPEATABLE READ makes
      ``UPDATE … WHERE id IN (…)`` take next-key locks on the gaps between random UUIDs; those
      gaps are where the application's actions insert new events, so each side waited on the
      other and one of them — often the application's action — died as a deadlock victim. READ
      COMMITTED locks only the rows changed; nothing here relies on a repeatable snapshot.
    * PostgreSQL: index scans for the pipeline's statements (see ``_POSTGRESQL_READS``) and, for
      writes, ``synchronous_commit = off``. Every write here can be repeated safely — a lost
      fan-out is fanned out again (the unique key absorbs it), a lost outcome means one more
      delivery, which at-least-once delivery allows. The settings last while the pipeline holds
      the connection; the pool gets it back with the values it had, so the application's own
      transactions, handlers' included, keep the server's settings.
    * SQLite has neither; it locks the whole file anyway.
    """
    settings = {}
    if provider.dialect is DialectName.POSTGRESQL:
        settings = {**_POSTGRESQL_READS, **(_POSTGRESQL_WRITES if writes else {})}
    connection = provider.connect()
    previous: dict[str, str] = {}
    try:
        if provider.dialect in _MYSQL_FAMILY:
            connection.execution_options(isolation_level="READ COMMITTED")
        elif settings:
            previous = _set(connection, settings)
            connection.commit()
        yield connection
    finally:
        if previous and not connection.invalidated:
            try:
                connection.rollback()
                _set(connection, previous)
                connection.commit()
            except Exception:
                # never hand a changed session back to the pool, nor hide the error that got here
                connection.invalidate()
        connection.close()


def _set(connection: sa.Connection, settings: dict[str, str]) -> dict[str, str]:
    """Apply ``settings`` to the session in one round trip; return the values they replaced."""
    names = list(settings)
    reads = ", ".join(f"current_setting(:name_{i})" for i in range(len(names)))
    writes = ", ".join(f"set_config(:name_{i}, :value_{i}, false)" for i in range(len(names)))
    params = {f"name_{i}": name for i, name in enumerate(names)}
    params |= {f"value_{i}": settings[name] for i, name in enumerate(names)}
    # the SELECT list is evaluated left to right: the old values are read before they change
    old = connection.execute(sa.text(f"SELECT {reads}, {writes}"), params).one()
    return {name: old[i] for i, name in enumerate(names)}
