"""Core's own contribution to ``ekbatan.migrations``: the outbox's tables in the eventlog.

Component ``outbox``, version 1: the eventlog schema (a database on MariaDB/MySQL), ``events``
and ``action_traces`` with their indexes, every statement idempotent (``IF NOT EXISTS``, and on
MySQL the indexes inside ``CREATE TABLE``). ``event_notifications`` is not core's: the local
event handler, its only reader and writer, contributes it (component ``event_notifications``,
``ekbatan.local_event_handler.notifications_ddl``).

History: releases before that move contributed one component ``eventlog`` — 1 (the schema,
``events`` and ``event_notifications``), 2 (``event_notifications_open`` on MariaDB/MySQL), 3
(``action_traces``) — and the databases they migrated still list those three versions. Nothing
contributes them any more, so the migrator leaves those rows alone: it never re-runs them,
never compares their checksums (no warning) and never reports them. On such a database
``outbox 1`` and ``event_notifications 1`` are new versions whose statements find everything
in place and change nothing; on a fresh database they create the same tables, columns and
indexes as ``eventlog`` 1 to 3 did.
"""

from __future__ import annotations

from ekbatan.core.migrations._contributions import Migration
from ekbatan.core.migrations._eventlog_ddl import DEFAULT_EVENTLOG_SCHEMA, eventlog_statements

#: core's component in ``ekbatan_schema_history``
OUTBOX_COMPONENT = "outbox"


def _outbox_v1(dialect: str, *, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    return eventlog_statements(dialect, eventlog_schema)


def core_migrations() -> list[Migration]:
    """The entry point ``outbox`` (declared in ekbatan-core's pyproject)."""
    return [
        Migration(
            OUTBOX_COMPONENT,
            "1",
            "eventlog schema with events and action_traces and their indexes",
            _outbox_v1,
        ),
    ]
