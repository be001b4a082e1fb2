"""The fan-out as set-based SQL: the database copies each event into one notification per
subscribed handler itself, so no event's payload travels to Python and back.

PostgreSQL does a round in one statement: a CTE picks the oldest undelivered events of the
subscribed types, inserts their notifications (skipping pairs that exist) and flips them to
delivered. MySQL, MariaDB and SQLite, whose CTEs cannot write, take three statements in one
transaction: pick the ids, insert from them, flip them.

Each dialect's conflict skip touches duplicate keys only — never MySQL's ``INSERT IGNORE``, which
would also turn a truncation or a bad value into a warning and store the row. New ids come from
the database: ``gen_random_uuid()`` (PostgreSQL 13+), ``UUID()`` (MariaDB, MySQL), random bytes
shaped as a version-4 UUID (SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from ekbatan.core.migrations import eventlog_table_name
from ekbatan.core.persistence import DialectName, UtcDateTime
from ekbatan.local_event_handler.notifications_table import (
    COPIED_COLUMNS,
    notifications_channel,
    notifications_table_name,
)
from ekbatan.local_event_handler.states import NotificationState

_INSERTED = ", ".join(
    (
        "id",
        "event_id",
        "handler_name",
        *COPIED_COLUMNS,
        "state",
        "attempts",
        "next_retry_at",
        "created_date",
        "updated_date",
    )
)

_NEW_ID = {
    DialectName.POSTGRESQL: "gen_random_uuid()",
    DialectName.MARIADB: "UUID()",
    DialectName.MYSQL: "UUID()",
    DialectName.SQLITE: (
        "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' "
        "|| substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' "
        "|| hex(randomblob(6)))"
    ),
}


@dataclass(frozen=True)
class FanoutStatements:
    """The statements of one shard's round, for one set of subscriptions."""

    dialect: DialectName
    #: PostgreSQL: the whole round, the handling job's NOTIFY included; its rows are the flipped
    #: events' types, each carrying the count inserted
    round: sa.TextClause | None
    #: the other dialects: pick, insert, flip
    pick: sa.TextClause | None
    insert: sa.TextClause | None
    flip: sa.TextClause | None
    params: dict[str, Any]

    def run(self, connection: sa.Connection, limit: int, now: datetime) -> FanoutRound:
        """Fan out up to ``limit`` events in the caller's transaction."""
        params = {**self.params, "limit": limit, "now": now}
        if self.round is not None:
            flipped = connection.execute(self.round, params).all()
            return FanoutRound(
                len(flipped), (flipped[0][1] if flipped else 0), tuple(row[0] for row in flipped)
            )
        assert self.pick is not None and self.insert is not None and self.flip is not None
        picked = connection.execute(self.pick, params).all()
        if not picked:
            return FanoutRound(0, 0, ())
        ids = [row[0] for row in picked]
        inserted = connection.execute(self.insert, {**params, "ids": ids}).rowcount
        connection.execute(self.flip, {"ids": ids})
        return FanoutRound(len(ids), max(inserted, 0), tuple(row[1] for row in picked))


class FanoutRound(NamedTuple):
    """What one shard's round fanned out: events, notifications written, each event's type."""

    events: int
    notifications: int
    event_types: tuple[str, ...]


def fanout_statements(
    dialect: DialectName, eventlog_schema: str, subscriptions: Sequence[tuple[str, str]]
) -> FanoutStatements:
    """Statements fanning events out to ``subscriptions``, (event_type, handler_name) pairs."""
    events = eventlog_table_name(dialect, "events", eventlog_schema)
    notifications = notifications_table_name(dialect, eventlog_schema)
    params: dict[str, Any] = {}
    selects = []
    for index, (event_type, handler_name) in enumerate(subscriptions):
        params[f"type_{index}"], params[f"handler_{index}"] = event_type, handler_name
        if dialect is DialectName.POSTGRESQL:  # untyped parameters in a UNION need a type there
            selects.append(
                f"SELECT CAST(:type_{index} AS TEXT) AS event_type, CAST(:handler_{index} AS TEXT) AS handler_name"
            )
        else:
            selects.append(f"SELECT :type_{index} AS event_type, :handler_{index} AS handler_name")
    event_types = sorted({event_type for event_type, _ in subscriptions})
    for index, event_type in enumerate(event_types):
        params[f"event_type_{index}"] = event_type
    types_in = ", ".join(f":event_type_{index}" for index in range(len(event_types)))
    subscribed = " UNION ALL ".join(selects)
    copied = ", ".join(f"e.{column}" for column in COPIED_COLUMNS)
    pending = NotificationState.PENDING.value
    select_notifications = (
        f"SELECT {_NEW_ID[dialect]}, e.id, s.handler_name, {copied}, '{pending}', 0, e.event_date, :now, :now "
        f"FROM {events} e JOIN ({subscribed}) s ON s.event_type = e.event_type"
    )
    undelivered = f"delivered = {_false(dialect)} AND event_type IN ({types_in})"
    now = sa.bindparam("now", type_=UtcDateTime())
    if dialect is DialectName.POSTGRESQL:
        params["channel"] = notifications_channel(eventlog_schema)
        round_sql = sa.text(
            f"WITH picked AS (SELECT id FROM {events} WHERE {undelivered} ORDER BY event_date LIMIT :limit), "
            f"inserted AS (INSERT INTO {notifications} ({_INSERTED}) "
            f"{select_notifications} JOIN picked p ON p.id = e.id "
            "ON CONFLICT (event_id, handler_name) DO NOTHING RETURNING 1) "
            f"UPDATE {events} SET delivered = TRUE WHERE id IN (SELECT id FROM picked) "
            # the handling job's wake-up, queued in the same statement (one round trip less on
            # the way from an event to its handlers); an uncorrelated subquery runs once
            "RETURNING event_type, (SELECT count(*) FROM inserted), "
            "(SELECT pg_notify(:channel, '') WHERE EXISTS (SELECT 1 FROM inserted)) IS NULL"
        ).bindparams(now)
        return FanoutStatements(dialect, round_sql, None, None, None, params)
    pick = sa.text(
        f"SELECT id, event_type FROM {events} WHERE {undelivered} ORDER BY event_date LIMIT :limit"
    )
    if dialect is DialectName.SQLITE:
        skip = " ON CONFLICT (event_id, handler_name) DO NOTHING"
    else:
        # a no-op assignment: only a duplicate key is skipped, every other error still raises
        skip = " ON DUPLICATE KEY UPDATE state = state"
    insert = sa.text(
        f"INSERT INTO {notifications} ({_INSERTED}) {select_notifications} WHERE e.id IN :ids{skip}"
    ).bindparams(now, sa.bindparam("ids", expanding=True))
    flip = sa.text(f"UPDATE {events} SET delivered = {_true(dialect)} WHERE id IN :ids").bindparams(
        sa.bindparam("ids", expanding=True)
    )
    return FanoutStatements(dialect, None, pick, insert, flip, params)


def _false(dialect: DialectName) -> str:
    return "0" if dialect is DialectName.SQLITE else "FALSE"


def _true(dialect: DialectName) -> str:
    return "1" if dialect is DialectName.SQLITE else "TRUE"
