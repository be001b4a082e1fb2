"""The connections the pipeline reads and writes through, and why they differ from the application's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
      delivery, which at-least-once delivery allows. The settings are transaction-local, set as
      each of this connection's transactions begins: they end with the transaction whatever
      happens, so the pool never gets a changed session back (the application's own
      transactions, handlers' included, keep the server's settings), and no round trips are
      spent setting and restoring them around every round.
    * SQLite has neither; it locks the whole file anyway.
    """
    settings = {}
    if provider.dialect is DialectName.POSTGRESQL:
        settings = {**_POSTGRESQL_READS, **(_POSTGRESQL_WRITES if writes else {})}
    connection = provider.connect()
    try:
        if provider.dialect in _MYSQL_FAMILY:
            connection.execution_options(isolation_level="READ COMMITTED")
        elif settings:
            relax = _set_local(settings)
            sa.event.listen(connection, "begin", relax)
        yield connection
    finally:
        connection.close()


def _set_local(settings: dict[str, str]) -> Callable[[sa.Connection], None]:
    """A ``begin`` hook applying ``settings`` to the transaction that begins, in one round trip."""
    names = list(settings)
    statement = sa.text(
        "SELECT " + ", ".join(f"set_config(:name_{i}, :value_{i}, true)" for i in range(len(names)))
    )
    params = {f"name_{i}": name for i, name in enumerate(names)}
    params |= {f"value_{i}": settings[name] for i, name in enumerate(names)}

    def apply(connection: sa.Connection) -> None:
        connection.execute(statement, params)

    return apply
