from __future__ import annotations

from typing import ClassVar

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect


class PostgreSqlDialect(SqlDialect):
    """``timestamptz`` columns bound as aware UTC datetimes; single-statement lock-and-fetch."""

    dialect: ClassVar[Dialect] = Dialect.POSTGRESQL
    supports_lock_and_fetch = True
    single_statement_lock_and_fetch = True

    def lock_and_fetch_select_tail(self, n: int) -> str:
        return f" FOR UPDATE SKIP LOCKED LIMIT {int(n)}"
