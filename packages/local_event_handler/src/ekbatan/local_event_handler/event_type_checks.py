"""Handlers subscribed to an event type no recorded event has.

A handler whose ``event_type()`` names a class no action records (a wrong class, an event the
application stopped recording) is never called, and nothing else says so: the fan-out simply
finds nothing for it. The events recorded so far in a shard's eventlog are the one place that
says which event types the application's actions record; while the eventlog holds no event at
all it says nothing, and no handler is reported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sqlalchemy as sa

from ekbatan.core.migrations import eventlog_tables
from ekbatan.core.persistence import DialectName
from ekbatan.local_event_handler.handler_registry import EventHandlerRegistry

__all__ = ["UnrecordedSubscription", "unrecorded_subscriptions"]

log = logging.getLogger("ekbatan.local_event_handler")


@dataclass(frozen=True)
class UnrecordedSubscription:
    """A handler (its canonical name) and the event type it subscribes to, of which the
    eventlog holds no event."""

    handler: str
    event_type: str


def unrecorded_subscriptions(
    connection: sa.Connection,
    dialect: DialectName | str,
    eventlog_schema: str,
    registry: EventHandlerRegistry,
) -> list[UnrecordedSubscription] | None:
    """The subscriptions of ``registry`` whose event type no event in the eventlog has, in
    registration order; None when the eventlog holds no event at all (nothing is known then).

    One existence query per handled event type: a type with events stops at its first row."""
    events = eventlog_tables(dialect, eventlog_schema).events
    if connection.execute(sa.select(sa.literal(1)).select_from(events).limit(1)).first() is None:
        return None
    missing = []
    for event_type in registry.handled_event_types():
        query = sa.select(sa.literal(1)).select_from(events).where(events.c.event_type == event_type).limit(1)
        if connection.execute(query).first() is None:
            missing += [UnrecordedSubscription(h, event_type) for h in registry.subscribers_for(event_type)]
    return missing


def warn_unrecorded_subscriptions(subscriptions: list[UnrecordedSubscription], where: str) -> None:
    for subscription in subscriptions:
        log.warning(
            "handler %r subscribes to event type %r, of which %s holds no event: no action has recorded "
            "one so far, so the handler has never been called; check that its event_type() is the class "
            "an action records",
            subscription.handler,
            subscription.event_type,
            where,
        )
