"""``ekbatan_schema_history``: which (component, version) a database already has.

It lives in the connection's default schema (PostgreSQL ``search_path``, the URL's database on
MySQL/MariaDB, the SQLite file), one per shard, next to ``scheduled_tasks``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from ekbatan.core.persistence.dialect import Dialect

HISTORY_TABLE = "ekbatan_schema_history"
_PG_LOCK_KEY = 0x454B42_5441  # "EKBTA": one advisory lock for every Ekbatan migrator


def history_table_statement(dialect: Dialect) -> str:
    timestamp = (
        "DATETIME(6)"
        if dialect.is_mysql_family
        else ("DATETIME" if dialect is Dialect.SQLITE else "TIMESTAMP")
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (\n"
        f"  component VARCHAR(100) NOT NULL,\n"
        f"  version VARCHAR(50) NOT NULL,\n"
        f"  description VARCHAR(255) NOT NULL,\n"
        f"  checksum CHAR(64) NOT NULL,\n"
        f"  applied_at {timestamp} NOT NULL,\n"
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


def acquire_migration_lock(connection: sa.Connection, dialect: Dialect, timeout_seconds: int = 600) -> None:
    """Serialise migrators of one database (several replicas may start at once)."""
    if dialect is Dialect.POSTGRESQL:
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_LOCK_KEY})")
    elif dialect.is_mysql_family:
        got = connection.exec_driver_sql(
            f"SELECT GET_LOCK(CONCAT('ekbatan_migrate:', DATABASE()), {int(timeout_seconds)})"
        ).scalar()
        if got != 1:
            raise TimeoutError(f"another migrator held the migration lock for over {timeout_seconds} s")
    # SQLite: every version runs in BEGIN IMMEDIATE, which already excludes other writers.


def release_migration_lock(connection: sa.Connection, dialect: Dialect) -> None:
    if dialect is Dialect.POSTGRESQL:
        connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_PG_LOCK_KEY})")
    elif dialect.is_mysql_family:
        connection.exec_driver_sql("SELECT RELEASE_LOCK(CONCAT('ekbatan_migrate:', DATABASE()))")
