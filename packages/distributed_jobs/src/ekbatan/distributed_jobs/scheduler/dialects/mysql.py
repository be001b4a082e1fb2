from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect


class MySqlDialect(SqlDialect):
    """MySQL 8: UTC wall-clock ``DATETIME(6)`` values with the session pinned to ``+00:00``.

    The pin matters for tables still carrying the older ``TIMESTAMP(6)`` columns, which the
    server converts through the session time zone; ``DATETIME(6)`` stores what is bound.
    """

    dialect: ClassVar[Dialect] = Dialect.MYSQL
    supports_lock_and_fetch = True
    supports_delete_returning = False
    # db-scheduler's table declares `task_data blob`; a longer value fails in strict mode and is
    # cut short (the data silently corrupted) in non-strict mode, so it is refused before writing.
    max_task_data_bytes = 65_535
    task_data_column = "task_data blob"

    def encode_time(self, instant: datetime | None) -> Any:
        if instant is None:
            return None
        return instant.astimezone(UTC).replace(tzinfo=None)

    def lock_and_fetch_select_tail(self, n: int) -> str:
        # MySQL and MariaDB put the locking clause after LIMIT.
        return f" LIMIT {int(n)} FOR UPDATE SKIP LOCKED"

    def prepare_connection(self, dbapi_connection: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SET time_zone = '+00:00'")
        finally:
            cursor.close()


class MariaDbDialect(MySqlDialect):
    """MariaDB: as MySQL; ``SKIP LOCKED`` exists from 10.6 on."""

    dialect: ClassVar[Dialect] = Dialect.MARIADB
    supports_delete_returning = True  # MariaDB has it; MySQL 8 does not
