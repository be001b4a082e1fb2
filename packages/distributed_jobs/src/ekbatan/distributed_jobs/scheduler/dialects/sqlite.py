from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


class SqliteDialect(SqlDialect):
    """Times as INTEGER epoch milliseconds and booleans as 0/1, as db-scheduler writes them.

    Binding ISO strings instead would break ``execution_time <= ?``: SQLite orders every
    INTEGER before every TEXT. No ``SKIP LOCKED``: only the fetch strategy works here.
    """

    dialect: ClassVar[Dialect] = Dialect.SQLITE
    supports_lock_and_fetch = False
    # RETURNING arrived in SQLite 3.35
    supports_delete_returning = sqlite3.sqlite_version_info >= (3, 35)
    busy_timeout_ms: ClassVar[int] = 30_000
    #: times are stored as epoch milliseconds
    time_resolution: ClassVar[timedelta] = timedelta(milliseconds=1)

    def encode_time(self, instant: datetime | None) -> Any:
        if instant is None:
            return None
        return (instant - _EPOCH) // _MILLISECOND

    def decode_time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int | float):
            return _EPOCH + timedelta(milliseconds=int(value))
        if isinstance(value, str):
            if value.lstrip("-").isdigit():
                return _EPOCH + timedelta(milliseconds=int(value))
            parsed = datetime.fromisoformat(value)
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        return super().decode_time(value)

    def encode_bool(self, value: bool) -> Any:
        return 1 if value else 0

    def prepare_connection(self, dbapi_connection: Any) -> None:
        # Several scheduler processes share one file: wait for the writer instead of failing
        # with "database is locked", and let readers proceed beside it (WAL).
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            mode = cursor.execute("PRAGMA journal_mode").fetchone()
            if mode and str(mode[0]).lower() not in ("wal", "memory"):
                try:
                    cursor.execute("PRAGMA journal_mode = WAL")
                except sqlite3.OperationalError:
                    # The switch needs the whole file and fails at once (no busy wait) while
                    # another connection writes — or switches it too. WAL only lets readers run
                    # beside the writer, and the mode is stored in the file: a later connection
                    # switches it. Locking stays correct either way.
                    pass
        finally:
            cursor.close()
