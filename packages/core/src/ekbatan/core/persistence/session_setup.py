"""What every new connection must be told before Ekbatan uses it, per dialect.

Registered as pool ``connect`` listeners, so it runs once per physical connection, including
the ones a pool opens long after start-up.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from ekbatan.core.persistence.dialect import Dialect

SQLITE_BUSY_TIMEOUT_MS = 30_000


def install_session_setup(engine: sa.Engine, dialect: Dialect) -> None:
    if dialect.is_mysql_family:
        event.listen(engine, "connect", _utc_session)
    elif dialect is Dialect.SQLITE:
        event.listen(engine, "connect", _sqlite_connection)
        event.listen(engine, "begin", _sqlite_begin_immediate)


def _utc_session(dbapi_connection: Any, connection_record: Any) -> None:
    # Timestamps are stored as UTC without zone; a session in another zone would shift
    # TIMESTAMP columns (scheduled_tasks) on the way in and out.
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")


def _sqlite_connection(dbapi_connection: Any, connection_record: Any) -> None:
    # Take transaction control away from the sqlite3 module, which would otherwise not BEGIN
    # before DDL or SELECT; the "begin" listener below issues the BEGIN itself.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # Several processes share one file: wait for a lock instead of failing at once, and
        # let readers proceed while one writer commits.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
    finally:
        cursor.close()


def _sqlite_begin_immediate(connection: sa.Connection) -> None:
    # IMMEDIATE takes the write lock up front, so busy_timeout applies; a deferred transaction
    # that later upgrades to writing fails with SQLITE_BUSY at once when another writer won.
    connection.exec_driver_sql("BEGIN IMMEDIATE")
