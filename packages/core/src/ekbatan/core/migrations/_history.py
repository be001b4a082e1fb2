"""``ekbatan_schema_history``: which (component, version) a database already has.

It lives in the connection's default schema (PostgreSQL ``search_path``, the URL's database on
MySQL/MariaDB, the SQLite file), one per shard, next to ``scheduled_tasks``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence.dialects import dialect_support

HISTORY_TABLE = "ekbatan_schema_history"


def history_table_statement(dialect: DialectName) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (\n"
        f"  component VARCHAR(100) NOT NULL,\n"
        f"  version VARCHAR(50) NOT NULL,\n"
        f"  description VARCHAR(255) NOT NULL,\n"
        f"  checksum CHAR(64) NOT NULL,\n"
        f"  applied_at {dialect_support(dialect).timestamp_ddl} NOT NULL,\n"
        f"  PRIMARY KEY (component, version)\n"
        f")"
    )


_history = sa.table(
    HISTORY_TABLE,
    sa.column("component", sa.String),
    sa.column("version", sa.String),
    sa.column("description", sa.String),
    sa.column("checksum", sa.String),
    sa.column("applied_at", sa.DateTime),
)


def applied_versions(connection: sa.Connection) -> dict[tuple[str, str], str]:
    rows = connection.execute(sa.select(_history.c.component, _history.c.version, _history.c.checksum))
    return {(row.component, row.version): row.checksum for row in rows}


def record_version(
    connection: sa.Connection, component: str, version: str, description: str, checksum: str
) -> None:
    connection.execute(
        sa.insert(_history).values(
            component=component,
            version=version,
            description=description[:255],
            checksum=checksum,
            applied_at=datetime.now(UTC).replace(tzinfo=None),
        )
    )


def rerecord_version(
    connection: sa.Connection, component: str, version: str, description: str, checksum: str
) -> None:
    """Replace the row of a version applied again (its checksum is now the statements just run)."""
    connection.execute(
        sa.delete(_history).where(_history.c.component == component, _history.c.version == version)
    )
    record_version(connection, component, version, description, checksum)


def acquire_migration_lock(
    connection: sa.Connection, dialect: DialectName, timeout_seconds: int = 600
) -> None:
    """Serialise migrators of one database (several replicas may start at once)."""
    dialect_support(dialect).acquire_migration_lock(connection, timeout_seconds)


def release_migration_lock(connection: sa.Connection, dialect: DialectName) -> None:
    dialect_support(dialect).release_migration_lock(connection)
