"""Core's own contribution to ``ekbatan.migrations``: the eventlog (outbox) tables."""

from __future__ import annotations

from ekbatan.core.migrations._contributions import Migration
from ekbatan.core.migrations._eventlog_ddl import (
    DEFAULT_EVENTLOG_SCHEMA,
    eventlog_action_traces,
    eventlog_open_notifications_index,
    eventlog_statements,
)


def _eventlog_v1(dialect: str, *, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    return eventlog_statements(dialect, eventlog_schema)


def _eventlog_v2(dialect: str, *, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    return eventlog_open_notifications_index(dialect, eventlog_schema)


def _eventlog_v3(dialect: str, *, eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA) -> list[str]:
    return eventlog_action_traces(dialect, eventlog_schema)


def core_migrations() -> list[Migration]:
    """The entry point ``eventlog`` (declared in ekbatan-core's pyproject)."""
    return [
        Migration(
            "eventlog",
            "1",
            "eventlog schema with events and event_notifications and their indexes",
            _eventlog_v1,
        ),
        Migration(
            "eventlog",
            "2",
            "index of open notifications by state and due time (MariaDB, MySQL)",
            _eventlog_v2,
        ),
        Migration(
            "eventlog",
            "3",
            "trace context of actions run under a span (action_traces)",
            _eventlog_v3,
        ),
    ]
