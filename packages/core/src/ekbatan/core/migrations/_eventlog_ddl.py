"""DDL of the eventlog that core's outbox writes: its schema and the ``events`` and
``action_traces`` tables, per dialect.

Where the eventlog lives: PostgreSQL — a schema (default ``eventlog``) in the application
database; MySQL/MariaDB — a separate database of that name on the same server; SQLite — the
same file, with the name as a table prefix (``eventlog_events``), because an ATTACHed file is
not committed atomically with the main file under WAL, and the outbox exists to commit with the
business write. Packages that keep tables of their own there (the local event handler's
``event_notifications``) take the names to write from :func:`eventlog_table_name` and create
the schema with :func:`eventlog_schema_statements`, so that rule is written once, here.

Every statement is idempotent (``IF NOT EXISTS``); on MySQL, which has no
``CREATE INDEX IF NOT EXISTS``, the indexes are declared inside ``CREATE TABLE`` instead.
"""

from __future__ import annotations

from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier

DEFAULT_EVENTLOG_SCHEMA = "eventlog"


def eventlog_table_name(dialect: DialectName | str, table: str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> str:
    """The name to write in SQL for the eventlog's ``table``: ``eventlog.events`` or, on SQLite,
    ``eventlog_events``."""
    validate_sql_identifier(schema, "eventlog schema")
    validate_sql_identifier(table, "eventlog table")
    if DialectName(dialect) is DialectName.SQLITE:
        return f"{schema}_{table}"
    return f"{schema}.{table}"


def eventlog_schema_statements(
    dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> list[str]:
    """The statement creating the eventlog's schema (PostgreSQL) or database (MariaDB, MySQL)
    when it is missing; none on SQLite, where the eventlog is a table prefix."""
    validate_sql_identifier(schema, "eventlog schema")
    dialect = DialectName(dialect)
    if dialect is DialectName.POSTGRESQL:
        return [f"CREATE SCHEMA IF NOT EXISTS {schema}"]
    if dialect in (DialectName.MARIADB, DialectName.MYSQL):
        return [f"CREATE DATABASE IF NOT EXISTS {schema}"]
    return []


def eventlog_statements(dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    """``CREATE`` statements for the eventlog schema/database and core's tables, ``events`` and
    ``action_traces``, with their indexes: the statements of core's migration ``outbox 1``."""
    dialect = DialectName(dialect)
    return [
        *eventlog_schema_statements(dialect, schema),
        *_events(dialect, schema),
        *_action_traces(dialect, schema),
    ]


def _events(dialect: DialectName, s: str) -> list[str]:
    if dialect is DialectName.POSTGRESQL:
        return [
            f"""CREATE TABLE IF NOT EXISTS {s}.events (
  id UUID PRIMARY KEY,
  namespace VARCHAR(255) NOT NULL,
  action_id UUID NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params JSONB NOT NULL,
  started_date TIMESTAMP NOT NULL,
  completion_date TIMESTAMP NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255),
  payload JSONB,
  event_date TIMESTAMP NOT NULL,
  delivered BOOLEAN NOT NULL
)""",
            f"CREATE INDEX IF NOT EXISTS idx_events_action_id ON {s}.events (action_id)",
            f"CREATE INDEX IF NOT EXISTS events_undelivered ON {s}.events (event_type, event_date) "
            "WHERE delivered = FALSE",
        ]
    if dialect is DialectName.SQLITE:
        return [
            f"""CREATE TABLE IF NOT EXISTS {s}_events (
  id CHAR(36) PRIMARY KEY NOT NULL,
  namespace VARCHAR(255) NOT NULL,
  action_id CHAR(36) NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params JSON NOT NULL,
  started_date DATETIME NOT NULL,
  completion_date DATETIME NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255),
  payload JSON,
  event_date DATETIME NOT NULL,
  delivered BOOLEAN NOT NULL
)""",
            f"CREATE INDEX IF NOT EXISTS {s}_idx_events_action_id ON {s}_events (action_id)",
            f"CREATE INDEX IF NOT EXISTS {s}_events_undelivered ON {s}_events (event_type, event_date) "
            f"WHERE delivered = 0",
        ]
    if dialect is DialectName.MARIADB:
        uuid, uuid_pk, pk_clause = "UUID NOT NULL", "UUID PRIMARY KEY", ""
    else:
        uuid = "CHAR(36) CHARACTER SET ascii NOT NULL"
        uuid_pk, pk_clause = uuid, ",\n  PRIMARY KEY (id)"
    return [
        f"""CREATE TABLE IF NOT EXISTS {s}.events (
  id {uuid_pk},
  namespace VARCHAR(255) NOT NULL,
  action_id {uuid},
  action_name VARCHAR(255) NOT NULL,
  action_params JSON NOT NULL,
  started_date DATETIME(6) NOT NULL,
  completion_date DATETIME(6) NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255),
  payload JSON,
  event_date DATETIME(6) NOT NULL,
  delivered BOOLEAN NOT NULL{pk_clause},
  INDEX idx_events_action_id (action_id),
  INDEX events_pending_fanout (delivered, event_type, event_date)
)"""
    ]


def _action_traces(dialect: DialectName, schema: str) -> list[str]:
    """``action_traces``: the W3C trace context of each action run under a span (with tracing on),
    kept beside ``events`` rather than in it, so that ``events`` stays as every reader of it
    knows it. The event handlers' spans link to it; rows older than the notifications'
    retention window are pruned by the handling job."""
    if dialect is DialectName.SQLITE:
        table, index, uuid, time = (
            f"{schema}_action_traces",
            f"{schema}_action_traces_recorded",
            "CHAR(36)",
            "DATETIME",
        )
    else:
        table, index, time = f"{schema}.action_traces", "action_traces_recorded", "DATETIME(6)"
        uuid = {
            DialectName.POSTGRESQL: "UUID",
            DialectName.MARIADB: "UUID",
            DialectName.MYSQL: "CHAR(36) CHARACTER SET ascii",
        }[dialect]
        if dialect is DialectName.POSTGRESQL:
            time = "TIMESTAMP"
    inline_index = f",\n  INDEX {index} (recorded)" if dialect is DialectName.MYSQL else ""
    create = f"""CREATE TABLE IF NOT EXISTS {table} (
  action_id {uuid} NOT NULL PRIMARY KEY,
  traceparent VARCHAR(55) NOT NULL,
  tracestate VARCHAR(512),
  recorded {time} NOT NULL{inline_index}
)"""
    if dialect is DialectName.MYSQL:
        return [create]  # no CREATE INDEX IF NOT EXISTS there: declared in the table
    return [create, f"CREATE INDEX IF NOT EXISTS {index} ON {table} (recorded)"]
