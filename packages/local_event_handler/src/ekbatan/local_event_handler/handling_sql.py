"""The handling job's statements, and the tables it works per dialect and schema (the fan-out's
set-based statements are in ``fanout_sql``).

The tables are SQLAlchemy Core ``Table`` objects for the shard's dialect and eventlog schema —
``event_notifications`` this package's, ``action_traces`` core's — so values are the same
everywhere: ``uuid.UUID`` ids, aware UTC datetimes, JSON as dicts.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from ekbatan.core.migrations import eventlog_tables
from ekbatan.core.persistence import DialectName
from ekbatan.local_event_handler.notifications_table import notifications_table
from ekbatan.local_event_handler.states import OPEN_STATES, TERMINAL_STATES, NotificationState


class HandlingTables(NamedTuple):
    """A shard's tables as the handling job (and the re-drive, the gauges) use them."""

    event_notifications: sa.Table
    #: core's: the trace context of the actions whose events are handled
    action_traces: sa.Table


@functools.lru_cache(maxsize=64)
def tables(dialect: DialectName, schema: str) -> HandlingTables:
    return HandlingTables(
        notifications_table(dialect, schema), eventlog_tables(dialect, schema).action_traces
    )


def due_notifications(
    t: HandlingTables, dialect: DialectName, now: datetime, limit: int
) -> list[sa.Select[Any]]:
    """The reads of the ``limit`` open notifications due longest ago: each returns its rows in
    due order, and the caller merges them (:func:`merge_due`).

    PostgreSQL and SQLite walk their partial index of open rows in order: one read. MySQL and
    MariaDB have an ``(state, next_retry_at)`` index instead: one query over both open states
    would read every due row of both and sort them — a cost that grows with the backlog, exactly
    when the job must go fast — so each state is read in index order up to ``limit``, and only
    those rows are merged, here rather than in a ``UNION`` of derived tables (MariaDB 10.11 once
    crashed, signal 11, executing that form under load).
    """
    notifications = t.event_notifications

    def due(*states: str) -> sa.Select[Any]:
        return (
            sa.select(notifications)
            .where(
                notifications.c.state == states[0] if len(states) == 1 else notifications.c.state.in_(states),
                notifications.c.next_retry_at <= now,
            )
            .order_by(notifications.c.next_retry_at)
            .limit(limit)
        )

    if dialect not in (DialectName.MARIADB, DialectName.MYSQL):
        return [due(*OPEN_STATES)]
    return [due(state) for state in OPEN_STATES]


def merge_due(reads: Sequence[Sequence[sa.Row[Any]]], limit: int) -> list[sa.Row[Any]]:
    """The first ``limit`` rows of reads each in due order, in due order."""
    if len(reads) == 1:
        return list(reads[0][:limit])
    return list(itertools.islice(heapq.merge(*reads, key=lambda row: row.next_retry_at), limit))


def record_outcome(
    t: HandlingTables,
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
            # "not terminal" rather than "open": the same rows, but it does not match the partial
            # index of open rows, which PostgreSQL would otherwise walk whole (filtering on id)
            # instead of looking the ids up by primary key when its statistics are stale
            notifications.c.state.not_in(TERMINAL_STATES),
            notifications.c.attempts == attempts_read,
        )
        .values(values)
    )
