"""DDL of ``event_notifications`` per dialect, and the migration that creates it: component
``event_notifications``, contributed through the entry point of that name in the group
``ekbatan.migrations`` (this package's pyproject), as the scheduler contributes
``scheduled_tasks``.

Version 1 creates the eventlog schema (a database on MariaDB/MySQL) if it is missing, then the
table with all its indexes, every statement idempotent: ``CREATE ... IF NOT EXISTS`` and, on
MySQL, which has no ``CREATE INDEX IF NOT EXISTS``, the indexes declared inside
``CREATE TABLE``. Creating the schema itself makes the version independent of the apply order:
components run alphabetically, so ``event_notifications`` comes before core's ``outbox``, which
creates the schema too.

Databases migrated before this package contributed the table list core's old component
``eventlog`` (1: the schema, ``events`` and ``event_notifications``; 2: ``event_notifications_open``
on MariaDB/MySQL; 3: ``action_traces``). No package contributes those versions any more, so the
migrator neither re-runs them nor compares their checksums: they stay as history. There,
``event_notifications 1`` is a new version whose statements find the table and its indexes
in place and change nothing (its rows are untouched); on a fresh database it creates the same
columns and indexes as ``eventlog`` 1 and 2 did. When the table is later dropped, the version,
now recorded, is applied again (the migrator re-applies a recorded version whose
``CREATE TABLE`` target is missing).
"""

from __future__ import annotations

from ekbatan.core.migrations import (
    DEFAULT_EVENTLOG_SCHEMA,
    EventlogColumnTypes,
    Migration,
    eventlog_column_types,
    eventlog_index_name,
    eventlog_schema_statements,
)
from ekbatan.core.persistence import DialectName
from ekbatan.local_event_handler.notifications_table import notifications_table_name

__all__ = ["NOTIFICATIONS_COMPONENT", "notifications_migrations", "notifications_statements"]

#: the component's name in ``ekbatan_schema_history`` (and the entry point's)
NOTIFICATIONS_COMPONENT = "event_notifications"

#: the partial index of open rows (PostgreSQL, SQLite), as ``eventlog 1`` wrote it
_OPEN_ROWS = "WHERE state IN ('PENDING', 'FAILED')"


def notifications_statements(
    dialect: DialectName | str, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> list[str]:
    """The eventlog schema/database (if missing), ``event_notifications`` and its indexes."""
    dialect = DialectName(dialect)
    table = notifications_table_name(dialect, eventlog_schema)
    types = eventlog_column_types(dialect)
    schema = eventlog_schema_statements(dialect, eventlog_schema)
    if not dialect.is_mysql_family:
        due = eventlog_index_name(dialect, "event_notifications_due", eventlog_schema)
        return [
            *schema,
            _create_table(table, types),
            f"CREATE INDEX IF NOT EXISTS {due} ON {table} (next_retry_at) {_OPEN_ROWS}",
        ]
    # MariaDB and MySQL have no partial indexes: the open rows' index leads with their state,
    # so that the due-rows query does not step over every notification ever handled
    inline_due = ",\n  INDEX event_notifications_due (next_retry_at)"
    if dialect is DialectName.MYSQL:
        # no CREATE INDEX IF NOT EXISTS there: both declared in the table
        open_rows = ",\n  INDEX event_notifications_open (state, next_retry_at)"
        return [*schema, _create_table(table, types, inline_due + open_rows)]
    return [
        *schema,
        _create_table(table, types, inline_due),
        f"CREATE INDEX IF NOT EXISTS event_notifications_open ON {table} (state, next_retry_at)",
    ]


def notifications_migrations() -> list[Migration]:
    """The entry point ``event_notifications`` (declared in ekbatan-local-event-handler's pyproject)."""
    return [
        Migration(
            NOTIFICATIONS_COMPONENT,
            "1",
            "event_notifications (one delivery row per event and handler) and its indexes",
            _v1,
        )
    ]


def _v1(dialect: str, *, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    return notifications_statements(dialect, eventlog_schema)


def _create_table(table: str, t: EventlogColumnTypes, indexes: str = "") -> str:
    return f"""CREATE TABLE IF NOT EXISTS {table} (
  id {t.id},
  event_id {t.uuid} NOT NULL,
  handler_name VARCHAR(255) NOT NULL,
  namespace VARCHAR(255) NOT NULL,
  action_id {t.uuid} NOT NULL,
  action_name VARCHAR(255) NOT NULL,
  action_params {t.json} NOT NULL,
  started_date {t.time} NOT NULL,
  completion_date {t.time} NOT NULL,
  model_id VARCHAR(255),
  model_type VARCHAR(255),
  event_type VARCHAR(255) NOT NULL,
  payload {t.json},
  event_date {t.time} NOT NULL,
  state VARCHAR(24) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  next_retry_at {t.time} NOT NULL,
  created_date {t.time} NOT NULL,
  updated_date {t.time} NOT NULL{t.primary_key},
  UNIQUE (event_id, handler_name){indexes}
)"""
