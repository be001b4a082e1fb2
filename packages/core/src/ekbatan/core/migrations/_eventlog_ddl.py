"""DDL of the framework's outbox tables, ``events`` and ``event_notifications``, per dialect.

Where they live: PostgreSQL — a schema (default ``eventlog``) in the application database;
MySQL/MariaDB — a separate database of that name on the same server; SQLite — the same file,
with the name as a table prefix (``eventlog_events``), because an ATTACHed file is not committed
atomically with the main file under WAL, and the outbox exists to commit with the business write.

Every statement is idempotent (``IF NOT EXISTS``); on MySQL, which has no
``CREATE INDEX IF NOT EXISTS``, the indexes are declared inside ``CREATE TABLE`` instead.
"""

from __future__ import annotations

from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier

DEFAULT_EVENTLOG_SCHEMA = "eventlog"


def eventlog_table_names(
    dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> tuple[str, str]:
    """The qualified names to write in SQL: ``eventlog.events`` or, on SQLite, ``eventlog_events``."""
    validate_sql_identifier(schema, "eventlog schema")
    if DialectName(dialect) is DialectName.SQLITE:
        return f"{schema}_events", f"{schema}_event_notifications"
    return f"{schema}.events", f"{schema}.event_notifications"


def eventlog_statements(dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    """``CREATE`` statements for the eventlog schema/database and both tables with their indexes."""
    validate_sql_identifier(schema, "eventlog schema")
    dialect = DialectName(dialect)
    if dialect is DialectName.POSTGRESQL:
        return _postgresql(schema)
    if dialect is DialectName.MARIADB:
        return _mysql_family(schema, uuid="UUID", uuid_pk="UUID PRIMARY KEY", pk_clause="")
    if dialect is DialectName.MYSQL:
        ascii_uuid = "CHAR(36) CHARACTER SET ascii NOT NULL"
        return _mysql_family(schema, uuid=ascii_uuid, uuid_pk=ascii_uuid, pk_clause=",\n  PRIMARY KEY (id)")
    return _sqlite(schema)


def eventlog_open_notifications_index(
    dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> list[str]:
    """An index on ``(state, next_retry_at)`` where indexes cannot be partial (MariaDB, MySQL).

    Handled notifications stay in the table, and their ``next_retry_at`` lies in the past, so
    an index on ``next_retry_at`` alone makes the due-rows query step over every notification
    ever handled before it finds an open one. Leading with ``state`` confines it to the open
    rows. PostgreSQL and SQLite have had a partial index from the start.
    """
    validate_sql_identifier(schema, "eventlog schema")
    dialect = DialectName(dialect)
    if dialect is DialectName.MARIADB:
        return [
            f"CREATE INDEX IF NOT EXISTS event_notifications_open ON {schema}.event_notifications "
            "(state, next_retry_at)"
        ]
    if dialect is DialectName.MYSQL:
        # MySQL has no CREATE INDEX IF NOT EXISTS; one ALTER is atomic there, so the version is
        # either applied whole or not at all
        return [
            f"ALTER TABLE {schema}.event_notifications ADD INDEX event_notifications_open (state, next_retry_at)"
        ]
    return []


def eventlog_action_traces(dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    """``action_traces``: the W3C trace context of each action run under a span (with tracing on),
    kept beside ``events`` rather than in it, so that ``events`` stays as every reader of it
    knows it. The event handlers' spans link to it; rows older than the notifications'
    retention window are pruned by the fan-out job."""
    validate_sql_identifier(schema, "eventlog schema")
    dialect = DialectName(dialect)
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


def _postgresql(s: str) -> list[str]:
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
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
        f"CREATE INDEX IF NOT EXISTS events_undelivered ON {s}.events (event_type, event_date) WHERE delivered = FALSE",
        f"""CREATE TABLE IF NOT EXISTS {s}.event_notifications (
  id UUID PRIMARY KEY,
  event_id UUID NOT NULL,
  handler_name VARCHAR(255) NOT NULL,
  namespace VARCHAR(255) NOT NULL,
  action_id UUID NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params JSONB NOT NULL,
  started_date TIMESTAMP NOT NULL,
  completion_date TIMESTAMP NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255) NOT NULL,
  payload JSONB,
  event_date TIMESTAMP NOT NULL,
  state VARCHAR(24) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  next_retry_at TIMESTAMP NOT NULL,
  created_date TIMESTAMP NOT NULL,
  updated_date TIMESTAMP NOT NULL,
  UNIQUE (event_id, handler_name)
)""",
        f"CREATE INDEX IF NOT EXISTS event_notifications_due ON {s}.event_notifications (next_retry_at) "
        f"WHERE state IN ('PENDING', 'FAILED')",
    ]


def _mysql_family(s: str, *, uuid: str, uuid_pk: str, pk_clause: str) -> list[str]:
    not_null = "" if "NOT NULL" in uuid else " NOT NULL"
    return [
        f"CREATE DATABASE IF NOT EXISTS {s}",
        f"""CREATE TABLE IF NOT EXISTS {s}.events (
  id {uuid_pk},
  namespace VARCHAR(255) NOT NULL,
  action_id {uuid}{not_null},
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
)""",
        f"""CREATE TABLE IF NOT EXISTS {s}.event_notifications (
  id {uuid_pk},
  event_id {uuid}{not_null},
  handler_name VARCHAR(255) NOT NULL,
  namespace VARCHAR(255) NOT NULL,
  action_id {uuid}{not_null},
  action_name VARCHAR(255) NOT NULL,
  action_params JSON NOT NULL,
  started_date DATETIME(6) NOT NULL,
  completion_date DATETIME(6) NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255) NOT NULL,
  payload JSON,
  event_date DATETIME(6) NOT NULL,
  state VARCHAR(24) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  next_retry_at DATETIME(6) NOT NULL,
  created_date DATETIME(6) NOT NULL,
  updated_date DATETIME(6) NOT NULL{pk_clause},
  UNIQUE (event_id, handler_name),
  INDEX event_notifications_due (next_retry_at)
)""",
    ]


def _sqlite(s: str) -> list[str]:
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
        f"""CREATE TABLE IF NOT EXISTS {s}_event_notifications (
  id CHAR(36) PRIMARY KEY NOT NULL,
  event_id CHAR(36) NOT NULL,
  handler_name VARCHAR(255) NOT NULL,
  namespace VARCHAR(255) NOT NULL,
  action_id CHAR(36) NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params JSON NOT NULL,
  started_date DATETIME NOT NULL,
  completion_date DATETIME NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255) NOT NULL,
  payload JSON,
  event_date DATETIME NOT NULL,
  state VARCHAR(24) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  next_retry_at DATETIME NOT NULL,
  created_date DATETIME NOT NULL,
  updated_date DATETIME NOT NULL,
  UNIQUE (event_id, handler_name)
)""",
        f"CREATE INDEX IF NOT EXISTS {s}_event_notifications_due ON {s}_event_notifications (next_retry_at) "
        f"WHERE state IN ('PENDING', 'FAILED')",
    ]
