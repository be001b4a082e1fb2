"""SQLAlchemy Core ``Table`` objects for core's eventlog tables, ``events`` and ``action_traces``,
matching ``_eventlog_ddl`` per dialect (``event_notifications`` is the local event handler's:
``ekbatan.local_event_handler.notifications_table``).

Values read and written through them are the same on every dialect: ``uuid.UUID`` ids, aware
UTC datetimes (stored naive UTC), JSON as Python dicts, booleans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ekbatan.core.migrations._eventlog_ddl import DEFAULT_EVENTLOG_SCHEMA
from ekbatan.core.persistence._column_types import UtcDateTime, UuidText
from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier


@dataclass(frozen=True)
class EventlogTables:
    metadata: sa.MetaData
    events: sa.Table
    #: the trace context of actions run under a span
    action_traces: sa.Table


def eventlog_tables(dialect: DialectName | str, schema: str = DEFAULT_EVENTLOG_SCHEMA) -> EventlogTables:
    """Fresh ``Table`` objects for ``dialect`` with the eventlog under ``schema``.

    Do not call ``metadata.create_all`` with them: the DDL of record (partial indexes, MySQL
    UUID text) is in :func:`~ekbatan.core.migrations.eventlog_statements`, applied by ``migrate``.
    """
    validate_sql_identifier(schema, "eventlog schema")
    dialect = DialectName(dialect)
    metadata = sa.MetaData()
    if dialect is DialectName.SQLITE:
        table_schema, events_name, traces_name = None, f"{schema}_events", f"{schema}_action_traces"
    else:
        table_schema, events_name, traces_name = schema, "events", "action_traces"
    uuid_type, json_type = _types(dialect)

    events = sa.Table(
        events_name,
        metadata,
        sa.Column("id", uuid_type, primary_key=True),
        sa.Column("namespace", sa.String(255), nullable=False),
        sa.Column("action_id", uuid_type, nullable=False),
        sa.Column("action_name", sa.String(255), nullable=False),
        sa.Column("action_params", json_type, nullable=False),
        sa.Column("started_date", UtcDateTime(), nullable=False),
        sa.Column("completion_date", UtcDateTime(), nullable=False),
        sa.Column("model_id", sa.String(255), nullable=True),
        sa.Column("model_type", sa.String(255), nullable=True),
        sa.Column("event_type", sa.String(255), nullable=True),
        sa.Column("payload", json_type, nullable=True),
        sa.Column("event_date", UtcDateTime(), nullable=False),
        sa.Column("delivered", sa.Boolean(create_constraint=False), nullable=False),
        schema=table_schema,
    )
    action_traces = sa.Table(
        traces_name,
        metadata,
        sa.Column("action_id", uuid_type, primary_key=True),
        sa.Column("traceparent", sa.String(55), nullable=False),
        sa.Column("tracestate", sa.String(512), nullable=True),
        sa.Column("recorded", UtcDateTime(), nullable=False),
        schema=table_schema,
    )
    return EventlogTables(metadata, events, action_traces)


def _types(dialect: DialectName) -> tuple[sa.types.TypeEngine[Any], sa.types.TypeEngine[Any]]:
    if dialect is DialectName.POSTGRESQL:
        return postgresql.UUID(as_uuid=True), postgresql.JSONB()
    if dialect is DialectName.MARIADB:
        return sa.Uuid(as_uuid=True, native_uuid=True), sa.JSON()
    return UuidText(), sa.JSON()
