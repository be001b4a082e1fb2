"""DDL of the eventlog that core's outbox writes: its schema and the ``events`` and
``action_traces`` tables, per dialect.

Where the eventlog lives: PostgreSQL — a schema (default ``eventlog``) in the application
database; MySQL/MariaDB — a separate database of that name on the same server; SQLite — the
same file, with the name as a table prefix (``eventlog_events``), because an ATTACHed file is
not committed atomically with the main file under WAL, and the outbox exists to commit with the
business write. Packages that keep tables of their own there (the local event handler's
``event_notifications``) take the names to write from :func:`eventlog_table_name` and
:func:`eventlog_index_name`, their columns' types from :func:`eventlog_column_types` and create
the schema with :func:`eventlog_schema_statements`, so those rules are written once, here.

Every statement is idempotent (``IF NOT EXISTS``); on MySQL, which has no
``CREATE INDEX IF NOT EXISTS``, the indexes are declared inside ``CREATE TABLE`` instead.
"""

from __future__ import annotations

from typing import NamedTuple

from ekbatan.core.persistence._dialect_names import SUPPORTED_DIALECTS, DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier

DEFAULT_EVENTLOG_SCHEMA = "eventlog"


class EventlogColumnTypes(NamedTuple):
    """The SQL types of the eventlog's columns on one dialect.

    ``id`` declares a UUID column ``id`` as the primary key, ``NOT NULL`` included, except on
    MySQL, where the key is ``primary_key``: a clause to write after the last column (empty
    elsewhere). ``uuid``, ``json`` and ``time`` (naive UTC) are bare types: a column adds its
    own ``NOT NULL``.
    """

    id: str
    uuid: str
    json: str
    time: str
    primary_key: str = ""


# MySQL has no UUID type; ASCII keeps its text key at one byte a character. The trailing key
# clause is how the first release wrote it, and the migrations' checksums hold every byte.
_MYSQL_UUID = "CHAR(36) CHARACTER SET ascii"

_COLUMN_TYPES = {
    DialectName.POSTGRESQL: EventlogColumnTypes("UUID PRIMARY KEY", "UUID", "JSONB", "TIMESTAMP"),
    DialectName.MARIADB: EventlogColumnTypes("UUID PRIMARY KEY", "UUID", "JSON", "DATETIME(6)"),
    DialectName.MYSQL: EventlogColumnTypes(
        f"{_MYSQL_UUID} NOT NULL", _MYSQL_UUID, "JSON", "DATETIME(6)", ",\n  PRIMARY KEY (id)"
    ),
    DialectName.SQLITE: EventlogColumnTypes("CHAR(36) PRIMARY KEY NOT NULL", "CHAR(36)", "JSON", "DATETIME"),
}


def eventlog_column_types(dialect: DialectName | str) -> EventlogColumnTypes:
    """The column types of the eventlog's tables on ``dialect``."""
    try:
        return _COLUMN_TYPES[DialectName(dialect)]
    except ValueError:
        raise ValueError(
            f"no eventlog column types for the dialect {dialect!r}; Ekbatan supports {SUPPORTED_DIALECTS}"
        ) from None


def eventlog_table_name(dialect: DialectName | str, table: str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> str:
    """The name to write in SQL for the eventlog's ``table``: ``eventlog.events`` or, on SQLite,
    ``eventlog_events``."""
    validate_sql_identifier(schema, "eventlog schema")
    validate_sql_identifier(table, "eventlog table")
    if DialectName(dialect) is DialectName.SQLITE:
        return f"{schema}_{table}"
    return f"{schema}.{table}"


def eventlog_index_name(dialect: DialectName | str, index: str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> str:
    """The name to write in SQL for an index of an eventlog table: ``index`` (it lives in its
    table's schema) or, on SQLite, where a file's indexes share one namespace, ``index`` prefixed
    as the tables are (``eventlog_events_undelivered``)."""
    validate_sql_identifier(schema, "eventlog schema")
    validate_sql_identifier(index, "eventlog index")
    if DialectName(dialect) is DialectName.SQLITE:
        return f"{schema}_{index}"
    return index


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


def _events(dialect: DialectName, schema: str) -> list[str]:
    t = eventlog_column_types(dialect)
    table = eventlog_table_name(dialect, "events", schema)
    by_action = eventlog_index_name(dialect, "idx_events_action_id", schema)
    inline_indexes = ""
    if dialect.is_mysql_family:
        # MySQL has no CREATE INDEX IF NOT EXISTS, so the indexes are declared in the table (on
        # MariaDB as well: one statement for both). Without partial indexes there, the
        # undelivered rows' index leads with the flag.
        inline_indexes = (
            f",\n  INDEX {by_action} (action_id)"
            ",\n  INDEX events_pending_fanout (delivered, event_type, event_date)"
        )
    create = f"""CREATE TABLE IF NOT EXISTS {table} (
  id {t.id},
  namespace VARCHAR(255) NOT NULL,
  action_id {t.uuid} NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params {t.json} NOT NULL,
  started_date {t.time} NOT NULL,
  completion_date {t.time} NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255),
  payload {t.json},
  event_date {t.time} NOT NULL,
  delivered BOOLEAN NOT NULL{t.primary_key}{inline_indexes}
)"""
    if dialect.is_mysql_family:
        return [create]
    undelivered = eventlog_index_name(dialect, "events_undelivered", schema)
    false = "0" if dialect is DialectName.SQLITE else "FALSE"
    return [
        create,
        f"CREATE INDEX IF NOT EXISTS {by_action} ON {table} (action_id)",
        f"CREATE INDEX IF NOT EXISTS {undelivered} ON {table} (event_type, event_date) WHERE delivered = {false}",
    ]


def _action_traces(dialect: DialectName, schema: str) -> list[str]:
    """``action_traces``: the W3C trace context of each action run under a span (with tracing on),
    kept beside ``events`` rather than in it, so that ``events`` stays as every reader of it
    knows it. The event handlers' spans link to it; rows older than the notifications'
    retention window are pruned by the handling job."""
    t = eventlog_column_types(dialect)
    table = eventlog_table_name(dialect, "action_traces", schema)
    index = eventlog_index_name(dialect, "action_traces_recorded", schema)
    inline_index = f",\n  INDEX {index} (recorded)" if dialect is DialectName.MYSQL else ""
    create = f"""CREATE TABLE IF NOT EXISTS {table} (
  action_id {t.uuid} NOT NULL PRIMARY KEY,
  traceparent VARCHAR(55) NOT NULL,
  tracestate VARCHAR(512),
  recorded {t.time} NOT NULL{inline_index}
)"""
    if dialect is DialectName.MYSQL:
        return [create]  # no CREATE INDEX IF NOT EXISTS there: declared in the table
    return [create, f"CREATE INDEX IF NOT EXISTS {index} ON {table} (recorded)"]
