"""Re-driving notifications: the ``FAILED`` or ``EXPIRED`` rows of one handler sent back to
``PENDING``, due now, for the handling job to call the handler again at its next round.

What decides expiry: the handling job compares the notification row's own ``event_date`` (a
copy of the event's time, written by the fan-out) with its retention window, before the call
(a ``PENDING`` row past the window expires without one) and after a failed call (a retry that
would fall past the window expires instead). A row re-driven with that copy unchanged would
expire again at once whenever its event is older than the window — every ``EXPIRED`` row is.
So a re-drive restarts the row's window: it sets the row's ``event_date`` to the re-drive time
and its ``attempts`` to 0, and the row is tried as a new one would be (its backoff starts over,
its retries run for a whole window again). The event itself is not touched:
``eventlog.events.event_date`` (looked up by ``event_id``) keeps when it happened, while the
handler's envelope of a re-driven delivery carries the re-drive time as its ``event_date``.

Rows are changed in batches (each its own transaction on an engine), walked in id order, each
row at most once per call; every UPDATE is guarded by the state it was picked in, so a row the
handling job moved meanwhile (one that succeeded) is left as it is. A handling round still
running a ``FAILED`` row when it is re-driven cannot write its outcome over the re-drive: its
UPDATE is guarded by the attempts it read, and the re-drive set them to 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.core.migrations import DEFAULT_EVENTLOG_SCHEMA
from ekbatan.core.persistence import DialectName
from ekbatan.local_event_handler import handling_sql as sql
from ekbatan.local_event_handler.notifications_table import notifications_channel
from ekbatan.local_event_handler.states import NotificationState

__all__ = ["DEFAULT_REDRIVE_BATCH_SIZE", "REDRIVABLE_STATES", "redrive_notifications"]

#: the states a notification can be re-driven from: the others are open already or done
REDRIVABLE_STATES = (NotificationState.FAILED, NotificationState.EXPIRED)
#: rows changed per transaction
DEFAULT_REDRIVE_BATCH_SIZE = 500

_WAKE_HANDLING = sa.text("SELECT pg_notify(:channel, '')")


def redrive_notifications(
    bind: sa.Engine | sa.Connection,
    handler_name: str,
    *,
    states: Iterable[NotificationState | str] = REDRIVABLE_STATES,
    eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA,
    limit: int | None = None,
    batch_size: int = DEFAULT_REDRIVE_BATCH_SIZE,
    now: datetime | None = None,
) -> int:
    """Send ``handler_name``'s notifications in ``states`` (``FAILED``, ``EXPIRED`` or both)
    back to ``PENDING``, due ``now`` (default: the wall clock), with a fresh retention window;
    how many rows changed. At most ``limit`` rows when given.

    ``bind``: the shard's primary engine (each batch commits on its own) or a connection
    (the batches run in its transaction: the caller commits). On PostgreSQL the handling job's
    listeners are woken at commit, as the fan-out wakes them.
    """
    if not isinstance(handler_name, str) or not handler_name.strip():
        raise ValueError("handler_name must be a non-blank handler name, e.g. 'notify-carrier'")
    wanted = _states(states)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None; got {limit!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; got {batch_size!r}")
    when = (now or datetime.now(UTC)).astimezone(UTC)
    dialect = DialectName(bind.dialect.name)
    notifications = sql.tables(dialect, eventlog_schema).event_notifications
    picked_states = [s.value for s in wanted]
    changed, after = 0, None
    while limit is None or changed < limit:
        size = batch_size if limit is None else min(batch_size, limit - changed)
        pick = (
            sa.select(notifications.c.id)
            .where(notifications.c.handler_name == handler_name, notifications.c.state.in_(picked_states))
            .order_by(notifications.c.id)
            .limit(size)
        )
        if after is not None:
            pick = pick.where(notifications.c.id > after)
        with _batch(bind) as connection:
            ids = list(connection.execute(pick).scalars())
            if not ids:
                break
            changed += _redrive(connection, notifications, ids, picked_states, when)
            if dialect is DialectName.POSTGRESQL:
                # the handling job's wake-up, delivered at commit, as the fan-out sends it
                connection.execute(_WAKE_HANDLING, {"channel": notifications_channel(eventlog_schema)})
        if len(ids) < size:
            break
        after = ids[-1]
    return changed


def _states(states: Iterable[NotificationState | str]) -> tuple[NotificationState, ...]:
    if isinstance(states, str | NotificationState):
        states = (states,)
    chosen: list[NotificationState] = []
    for state in states:
        try:
            parsed = NotificationState(str(state).upper())
        except ValueError:
            parsed = None
        if parsed not in REDRIVABLE_STATES:
            raise ValueError(
                f"cannot re-drive notifications in state {state!r}: only FAILED and EXPIRED ones "
                "(PENDING ones are open already, SUCCEEDED ones are done)"
            )
        assert parsed is not None
        if parsed not in chosen:
            chosen.append(parsed)
    if not chosen:
        raise ValueError("states is empty: name FAILED, EXPIRED or both")
    return tuple(chosen)


def _redrive(
    connection: sa.Connection, notifications: sa.Table, ids: list[Any], states: list[str], when: datetime
) -> int:
    update = (
        sa.update(notifications)
        .where(notifications.c.id.in_(ids), notifications.c.state.in_(states))
        .values(
            state=NotificationState.PENDING.value,
            attempts=0,
            next_retry_at=when,
            # the retention window is counted from this copy of the event's time: restarted
            event_date=when,
            updated_date=when,
        )
    )
    return connection.execute(update).rowcount


@contextmanager
def _batch(bind: sa.Engine | sa.Connection) -> Iterator[sa.Connection]:
    if isinstance(bind, sa.Engine):
        with bind.begin() as connection:
            yield connection
    else:
        yield bind
