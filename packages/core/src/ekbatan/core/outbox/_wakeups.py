"""Wake-up hints on PostgreSQL: a committed action with events tells listeners so at once.

The outbox sends ``pg_notify(<channel>, '')`` inside the action's transaction, so the server
delivers it at commit and drops it on rollback. The local event handler's fan-out listens and
starts a round immediately instead of waiting out its poll delay. A hint only: polling still
finds every event, so a missed notification (a reconnect, a pooler that drops them) costs
latency, never an event. The server folds identical notifications of one transaction into one.
"""

from __future__ import annotations

import sqlalchemy as sa

from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier

# PostgreSQL truncates identifiers, channel names included, to 63 bytes
_MAX_CHANNEL = 63

_NOTIFY = sa.text("SELECT pg_notify(:channel, '')")


def events_channel(eventlog_schema: str) -> str:
    """The channel announcing new rows in ``<eventlog_schema>.events``."""
    return f"ekbatan_events_{validate_sql_identifier(eventlog_schema, 'eventlog schema')}"[:_MAX_CHANNEL]


def notify(connection: sa.Connection, channel: str) -> None:
    """Queue a notification on ``channel``, delivered when ``connection``'s transaction commits."""
    connection.execute(_NOTIFY, {"channel": channel})
