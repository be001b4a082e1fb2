"""MySQL and MariaDB: ``DATETIME(6)`` columns, UTC sessions and a named lock for migrators."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import mysql

from ekbatan.core.persistence.dialects._base import DialectSupport


class MySqlFamilySupport(DialectSupport):
    timestamp_ddl: ClassVar[str] = "DATETIME(6)"

    def timestamp_type(self) -> sa.types.TypeEngine[Any]:
        return mysql.DATETIME(fsp=6)

    def install_session_setup(self, engine: sa.Engine) -> None:
        event.listen(engine, "connect", _utc_session)

    def acquire_migration_lock(self, connection: sa.Connection, timeout_seconds: int) -> None:
        got = connection.exec_driver_sql(
            f"SELECT GET_LOCK(CONCAT('ekbatan_migrate:', DATABASE()), {int(timeout_seconds)})"
        ).scalar()
        if got != 1:
            raise TimeoutError(f"another migrator held the migration lock for over {timeout_seconds} s")

    def release_migration_lock(self, connection: sa.Connection) -> None:
        connection.exec_driver_sql("SELECT RELEASE_LOCK(CONCAT('ekbatan_migrate:', DATABASE()))")


def _utc_session(dbapi_connection: Any, connection_record: Any) -> None:
    # Timestamps are stored as UTC without zone; a session in another zone would shift
    # TIMESTAMP columns (scheduled_tasks) on the way in and out.
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
