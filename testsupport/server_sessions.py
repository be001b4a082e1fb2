"""Server sessions behind pooled connections, and ending one from outside, as a server restart
or an idle timeout would (PostgreSQL and MariaDB)."""

from __future__ import annotations

import sqlalchemy as sa

from testsupport.waiting import wait_until


def session_id(connection: sa.Connection | sa.PoolProxiedConnection) -> int:
    """The server session behind a connection: a SQLAlchemy one (whose errors SQLAlchemy wraps),
    or a raw pooled one, the kind the scheduler's own statements check out."""
    raw = connection.connection if isinstance(connection, sa.Connection) else connection
    postgres = type(raw.driver_connection).__module__.startswith("psycopg")
    query = "SELECT pg_backend_pid()" if postgres else "SELECT CONNECTION_ID()"
    if isinstance(connection, sa.Connection):
        return connection.exec_driver_sql(query).scalar_one()
    cursor = raw.driver_connection.cursor()
    try:
        cursor.execute(query)
        session = cursor.fetchone()[0]
    finally:
        cursor.close()
    raw.driver_connection.rollback()
    return session


def kill_sessions(url: str, *sessions: int) -> None:
    """End server sessions from another connection and wait until the server has closed them."""
    admin = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with admin.connect() as connection:
            postgres = connection.dialect.name == "postgresql"
            for session in sessions:
                if postgres:
                    connection.execute(sa.text("SELECT pg_terminate_backend(:id)"), {"id": session})
                else:
                    connection.exec_driver_sql(f"KILL {int(session)}")
            still_open = (
                "SELECT count(*) FROM pg_stat_activity WHERE pid = :id"
                if postgres
                else "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = :id"
            )

            def closed() -> bool:
                connection.rollback()  # a fresh snapshot of the activity view
                return all(
                    connection.execute(sa.text(still_open), {"id": s}).scalar_one() == 0 for s in sessions
                )

            wait_until(closed, timeout=10, message=f"sessions {sessions} closed by the server")
    finally:
        admin.dispose()
