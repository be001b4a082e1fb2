"""SQLite: one file shared by several processes, so every write transaction takes its lock up front."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event

from ekbatan.core.persistence.dialects._base import DialectSupport

SQLITE_BUSY_TIMEOUT_MS = 30_000


class SqliteSupport(DialectSupport):
    timestamp_ddl: ClassVar[str] = "DATETIME"

    def install_session_setup(self, engine: sa.Engine) -> None:
        event.listen(engine, "connect", _sqlite_connection)
        event.listen(engine, "begin", _sqlite_begin_immediate)

    # No migration lock: every version runs in BEGIN IMMEDIATE, which already excludes other
    # writers (the base class's lock methods do nothing).


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
