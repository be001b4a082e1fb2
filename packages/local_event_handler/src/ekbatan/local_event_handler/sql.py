"""Every statement the event pipeline runs, in one place, with the per-dialect differences.

The tables are SQLAlchemy Core ``Table`` objects from ``ekbatan.core`` for the shard's dialect
and eventlog schema, so values are the same everywhere: ``uuid.UUID`` ids, aware UTC
datetimes, JSON as dicts.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite

from ekbatan.core.migrations.eventlog_metadata import EventlogTables, eventlog_tables
from ekbatan.core.persistence import Dialect
from ekbatan.local_event_handler.states import OPEN_STATES, NotificationState

#: the columns a notification copies from its event
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


@functools.lru_cache(maxsize=64)
def tables(dialect: Dialect, schema: str) -> EventlogTables:
    return eventlog_tables(dialect, schema)


def undelivered_events(t: EventlogTables, event_types: Sequence[str], limit: int) -> sa.Select[Any]:
    """The oldest undelivered events of the given types. Sentinel rows (no event_type) never match."""
    events = t.events
    return (
        sa.select(events.c.id, *(events.c[name] for name in COPIED_COLUMNS))
        .where(events.c.delivered == sa.false(), events.c.event_type.in_(list(event_types)))
        .order_by(events.c.event_date)
        .limit(limit)
    )


def insert_notifications(t: EventlogTables, dialect: Dialect) -> sa.Insert:
    """An INSERT that skips rows whose (event_id, handler_name) already exists, and only those.

    MySQL's ``INSERT IGNORE`` would also turn a too-long value or a bad date into a warning and
    store a truncated row; ``ON DUPLICATE KEY UPDATE`` with a no-op assignment skips duplicate
    keys alone and still fails on everything else.
    """
    table = t.event_notifications
    if dialect is Dialect.POSTGRESQL:
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=["event_id", "handler_name"])
    if dialect is Dialect.SQLITE:
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=["event_id", "handler_name"])
    return mysql.insert(table).on_duplicate_key_update(handler_name=table.c.handler_name)


#: rows per multi-row INSERT: 19 columns each stays well under every driver's parameter limit
#: (PostgreSQL 65,535; SQLite 32,766)
INSERT_CHUNK = 1000


def insert_rows(connection: sa.Connection, statement: sa.Insert, rows: Sequence[dict[str, Any]]) -> None:
    """``statement`` with ``rows`` as multi-row VALUES, a chunk per statement: one round trip
    where an executemany would send a statement per row."""
    for start in range(0, len(rows), INSERT_CHUNK):
        connection.execute(statement.values(list(rows[start : start + INSERT_CHUNK])))


def mark_delivered(t: EventlogTables, ids: Sequence[uuid.UUID]) -> sa.Update:
    events = t.events
    return sa.update(events).where(events.c.id.in_(list(ids))).values(delivered=True)


def due_notifications(t: EventlogTables, now: datetime, limit: int) -> sa.Select[Any]:
    notifications = t.event_notifications
    return (
        sa.select(notifications)
        .where(notifications.c.state.in_(OPEN_STATES), notifications.c.next_retry_at <= now)
        .order_by(notifications.c.next_retry_at)
        .limit(limit)
    )


def record_outcome(
    t: EventlogTables,
    ids: Sequence[uuid.UUID],
    *,
    attempts_read: int,
    state: NotificationState,
    count_attempt: bool,
    updated: datetime,
    next_retry_at: datetime | None = None,
) -> sa.Update:
    """Move rows read with ``attempts_read`` attempts to ``state``.

    Guarded by what was read: a row still open and with the attempts this run saw. A run that
    overlaps this one (an execution revived while this one still runs) has either already
    moved the row — so it is no longer open, or its attempts grew — and this UPDATE then
    leaves it alone: a SUCCEEDED row is never turned back into FAILED, and no try counts twice.
    """
    notifications = t.event_notifications
    values: dict[str, Any] = {"state": state.value, "updated_date": updated}
    if count_attempt:
        values["attempts"] = notifications.c.attempts + 1
    if next_retry_at is not None:
        values["next_retry_at"] = next_retry_at
    return (
        sa.update(notifications)
        .where(
            notifications.c.id.in_(list(ids)),
            notifications.c.state.in_(OPEN_STATES),
            notifications.c.attempts == attempts_read,
        )
        .values(values)
    )
