"""PostgreSQL: zone-less ``TIMESTAMP`` columns and a session-level advisory lock for migrators."""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ekbatan.core.persistence.dialects._base import DialectSupport

_MIGRATION_LOCK_KEY = 0x454B42_5441  # "EKBTA": one advisory lock for every Ekbatan migrator


class PostgreSqlSupport(DialectSupport):
    timestamp_ddl: ClassVar[str] = "TIMESTAMP"

    def timestamp_type(self) -> sa.types.TypeEngine[Any]:
        return postgresql.TIMESTAMP(timezone=False)

    def acquire_migration_lock(self, connection: sa.Connection, timeout_seconds: int) -> None:
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATION_LOCK_KEY})")

    def release_migration_lock(self, connection: sa.Connection) -> None:
        connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_MIGRATION_LOCK_KEY})")
