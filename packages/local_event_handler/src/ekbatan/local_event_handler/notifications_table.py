"""The local event handler's table, ``event_notifications``: the name to write in SQL, its
SQLAlchemy ``Table`` and the PostgreSQL channel that announces new rows in it.

The table lives in the shard's eventlog beside core's ``events`` (``eventlog.event_notifications``;
on SQLite, where the eventlog is a table prefix, ``eventlog_event_notifications``). Its DDL, and
the migration that creates it, are in :mod:`~ekbatan.local_event_handler.notifications_ddl`.
Values read and written through the ``Table`` are those of ``events``: ``uuid.UUID`` ids, aware
UTC datetimes (stored naive UTC), JSON as Python dicts.
"""

from __future__ import annotations

import sqlalchemy as sa

from ekbatan.core.migrations import DEFAULT_EVENTLOG_SCHEMA, eventlog_table_name, eventlog_tables
from ekbatan.core.persistence import DialectName, UtcDateTime, validate_sql_identifier

__all__ = [
    "COPIED_COLUMNS",
    "NOTIFICATIONS_TABLE",
    "notifications_channel",
    "notifications_table",
    "notifications_table_name",
]

NOTIFICATIONS_TABLE = "event_notifications"

#: the columns a notification copies from its event, in the tables' order
COPIED_COLUMNS = (
    "namespace",
    "action_id",
    "action_name",
    "action_params",
    "started_date",
    "completion_date",
    "model_id",
    "model_type",
    "event_type",
    "payload",
    "event_date",
)

# PostgreSQL truncates identifiers, channel names included, to 63 bytes
_MAX_CHANNEL = 63


def notifications_table_name(
    dialect: DialectName | str, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> str:
    """The name to write in SQL: ``eventlog.event_notifications`` or, on SQLite,
    ``eventlog_event_notifications``."""
    return eventlog_table_name(dialect, NOTIFICATIONS_TABLE, eventlog_schema)


def notifications_table(
    dialect: DialectName | str, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA
) -> sa.Table:
    """A fresh ``Table`` (in a metadata of its own) for ``dialect`` with the eventlog under
    ``eventlog_schema``.

    The columns copied from the event have the types of core's ``events`` table (from
    :func:`~ekbatan.core.migrations.eventlog_tables`), so both read and write the same values.
    Do not call ``metadata.create_all`` with it: the DDL of record (partial indexes, MySQL UUID
    text) is :func:`~ekbatan.local_event_handler.notifications_statements`, applied by
    ``migrate``.
    """
    events = eventlog_tables(dialect, eventlog_schema).events
    uuid_type = events.c.id.type
    # the event's type is NULL only on the sentinel rows of actions without events, never fanned out
    copied = [
        sa.Column(name, events.c[name].type, nullable=events.c[name].nullable and name != "event_type")
        for name in COPIED_COLUMNS
    ]
    sqlite = DialectName(dialect) is DialectName.SQLITE
    return sa.Table(
        notifications_table_name(dialect, eventlog_schema) if sqlite else NOTIFICATIONS_TABLE,
        sa.MetaData(),
        sa.Column("id", uuid_type, primary_key=True),
        sa.Column("event_id", uuid_type, nullable=False),
        sa.Column("handler_name", sa.String(255), nullable=False),
        *copied,
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_retry_at", UtcDateTime(), nullable=False),
        sa.Column("created_date", UtcDateTime(), nullable=False),
        sa.Column("updated_date", UtcDateTime(), nullable=False),
        sa.UniqueConstraint("event_id", "handler_name"),
        schema=events.schema,
    )


def notifications_channel(eventlog_schema: str) -> str:
    """The PostgreSQL channel announcing new rows in ``<eventlog_schema>.event_notifications``:
    the fan-out (and a re-drive) notifies it, the handling job listens to it."""
    name = f"ekbatan_notifications_{validate_sql_identifier(eventlog_schema, 'eventlog schema')}"
    return name[:_MAX_CHANNEL]
