"""Where the outbox's events are on one shard: what ``ekbatan events status`` prints and the
operator view's overview shows.

Read from the shard's eventlog tables in two grouped queries: undelivered events by type (how
far behind the fan-out is — events of a type no handler subscribes to stay undelivered by
design), and notifications by handler and state (how far behind handling is, and what expired).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from ekbatan.core import DialectName
from ekbatan.core.migrations import eventlog_tables
from ekbatan.local_event_handler import NotificationState, notifications_table
from ekbatan.local_event_handler.states import OPEN_STATES

__all__ = ["EventlogStatus", "HandlerStatus", "UndeliveredEvents", "read_eventlog_status"]


@dataclass(frozen=True)
class UndeliveredEvents:
    """The events of one type not fanned out yet."""

    event_type: str
    count: int
    oldest: datetime | None


@dataclass
class HandlerStatus:
    """One handler's notifications: how many in each state, the most attempts any took, and the
    event date of its oldest open one (pending or failed), which tells how far behind it is."""

    handler: str
    #: by :class:`NotificationState` value; every state is present (0 when none)
    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in NotificationState})
    most_attempts: int = 0
    oldest_open: datetime | None = None

    @property
    def pending(self) -> int:
        return self.counts[NotificationState.PENDING.value]

    @property
    def failed(self) -> int:
        return self.counts[NotificationState.FAILED.value]

    @property
    def expired(self) -> int:
        return self.counts[NotificationState.EXPIRED.value]


@dataclass(frozen=True)
class EventlogStatus:
    """A shard's pipeline: undelivered events by type (oldest first), handlers by name."""

    undelivered: list[UndeliveredEvents]
    handlers: list[HandlerStatus]

    @property
    def undelivered_count(self) -> int:
        return sum(u.count for u in self.undelivered)

    @property
    def oldest_undelivered(self) -> datetime | None:
        return min((u.oldest for u in self.undelivered if u.oldest is not None), default=None)

    @property
    def expired(self) -> int:
        return sum(h.expired for h in self.handlers)


def read_eventlog_status(
    connection: sa.Connection,
    dialect: DialectName | str,
    eventlog_schema: str,
    handler_names: Iterable[str] = (),
) -> EventlogStatus:
    """The pipeline of the shard ``connection`` is on. ``handler_names``: handlers listed even
    without a notification (with zero counts). Raises ``sa.exc.DBAPIError`` when the eventlog
    tables are not there."""
    events = eventlog_tables(dialect, eventlog_schema).events
    notifications = notifications_table(dialect, eventlog_schema)
    undelivered = connection.execute(
        sa.select(events.c.event_type, sa.func.count(), sa.func.min(events.c.event_date))
        .where(events.c.delivered == sa.false())
        .group_by(events.c.event_type)
        .order_by(sa.func.min(events.c.event_date))
    ).all()
    by_state = connection.execute(
        sa.select(
            notifications.c.handler_name,
            notifications.c.state,
            sa.func.count(),
            sa.func.max(notifications.c.attempts),
            sa.func.min(notifications.c.event_date),
        )
        .group_by(notifications.c.handler_name, notifications.c.state)
        .order_by(notifications.c.handler_name, notifications.c.state)
    ).all()
    handlers = {name: HandlerStatus(name) for name in handler_names}
    for handler, state, count, most_attempts, oldest in by_state:
        status = handlers.setdefault(handler, HandlerStatus(handler))
        status.counts[state] = int(count)
        status.most_attempts = max(status.most_attempts, int(most_attempts or 0))
        if state in OPEN_STATES and oldest is not None:
            status.oldest_open = oldest if status.oldest_open is None else min(status.oldest_open, oldest)
    return EventlogStatus(
        undelivered=[UndeliveredEvents(r[0], int(r[1]), r[2]) for r in undelivered],
        handlers=sorted(handlers.values(), key=lambda h: h.handler),
    )
