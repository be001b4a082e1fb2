"""``ekbatan events status``: where the outbox's events are, per shard.

Reads each shard's eventlog tables on its primary (under the member's ``eventlog-schema``):
notifications by handler and state, how old the oldest undelivered event is (how far behind the
fan-out is — events of a type no handler subscribes to stay undelivered by design), how old the
oldest open notification of each handler is (how far behind handling is), and expired counts.
With ``--packages`` (and ``--config``) every handler of the application is listed, those without
a notification yet with zero counts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.core.migrations import eventlog_tables
from ekbatan.integrations.cli.app import Invocation, ekbatan_command, main
from ekbatan.integrations.cli.application import application_options, load_application
from ekbatan.integrations.cli.tables import format_age, render_table
from ekbatan.integrations.cli.targets import Shard
from ekbatan.local_event_handler import NotificationState
from ekbatan.local_event_handler.states import OPEN_STATES

__all__ = ["events"]

_STATES = [state.value for state in NotificationState]


@main.group()
def events() -> None:
    """The outbox's event pipeline: fan-out and handling progress."""


@ekbatan_command(events, "status")
@application_options
def status_command(invocation: Invocation, packages: str | None, container: str | None) -> None:
    """Notifications by handler and state, the oldest undelivered event, expired counts; with
    --packages, every handler of the application, those without notifications too."""
    target = invocation.target()
    application = load_application(invocation, packages, container)
    handler_names = application.handlers.handler_names() if application is not None else ()
    now = datetime.now(UTC)
    shards = []
    for shard in target.shards:
        provider = invocation.open(shard.primary)
        with shard.primary.connect(provider) as connection:
            target.require_eventlog(connection, shard)
            shards.append(shard_status(connection, shard, now, handler_names))
    invocation.emit({"shards": shards}, lambda: "\n\n".join(_human(s) for s in shards))


def _age(now: datetime, oldest: datetime | None) -> float | None:
    return None if oldest is None else round((now - oldest).total_seconds(), 3)


def _handler_row(handler: str) -> dict[str, Any]:
    return {"handler": handler, **{s.lower(): 0 for s in _STATES}, "most_attempts": 0, "_oldest_open": None}


def shard_status(
    connection: sa.Connection, shard: Shard, now: datetime, handler_names: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``handler_names``: handlers listed even without a notification (with zero counts)."""
    tables = eventlog_tables(shard.primary.dialect, shard.eventlog_schema)
    events_table, notifications = tables.events, tables.event_notifications
    undelivered = connection.execute(
        sa.select(events_table.c.event_type, sa.func.count(), sa.func.min(events_table.c.event_date))
        .where(events_table.c.delivered == sa.false())
        .group_by(events_table.c.event_type)
        .order_by(sa.func.min(events_table.c.event_date))
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
    handlers: dict[str, dict[str, Any]] = {name: _handler_row(name) for name in sorted(handler_names)}
    for handler, state, count, most_attempts, oldest in by_state:
        row = handlers.setdefault(handler, _handler_row(handler))
        row[state.lower()] = int(count)
        row["most_attempts"] = max(row["most_attempts"], int(most_attempts or 0))
        if state in OPEN_STATES and oldest is not None:
            row["_oldest_open"] = min(filter(None, (row["_oldest_open"], oldest)))
    for row in handlers.values():
        row["oldest_open_age_seconds"] = _age(now, row.pop("_oldest_open"))
    oldest_undelivered = min((r[2] for r in undelivered), default=None)
    return {
        "shard": shard.name,
        "dialect": shard.primary.dialect.value,
        "eventlog_schema": shard.eventlog_schema,
        "undelivered_events": {
            "count": sum(int(r[1]) for r in undelivered),
            "oldest_age_seconds": _age(now, oldest_undelivered),
            "by_type": [
                {"event_type": r[0], "count": int(r[1]), "oldest_age_seconds": _age(now, r[2])}
                for r in undelivered
            ],
        },
        "handlers": sorted(handlers.values(), key=lambda row: row["handler"]),
        "expired": sum(row["expired"] for row in handlers.values()),
    }


def _human(status: dict[str, Any]) -> str:
    lines = [f"shard {status['shard']} ({status['dialect']}, eventlog {status['eventlog_schema']})"]
    undelivered = status["undelivered_events"]
    if undelivered["count"]:
        lines.append(
            f"  undelivered events: {undelivered['count']}, "
            f"the oldest {format_age(undelivered['oldest_age_seconds'])} old"
        )
        lines.append(
            render_table(
                ("EVENT TYPE", "UNDELIVERED", "OLDEST"),
                [
                    (t["event_type"], t["count"], format_age(t["oldest_age_seconds"]))
                    for t in undelivered["by_type"]
                ],
                indent="    ",
            )
        )
    else:
        lines.append("  undelivered events: 0")
    if status["handlers"]:
        headers = ("HANDLER", *(s for s in _STATES), "MOST ATTEMPTS", "OLDEST OPEN")
        rows = [
            (
                h["handler"],
                *(h[s.lower()] for s in _STATES),
                h["most_attempts"],
                format_age(h["oldest_open_age_seconds"]),
            )
            for h in status["handlers"]
        ]
        lines.append(render_table(headers, rows, indent="  "))
    else:
        lines.append("  no notifications yet")
    lines.append(f"  expired notifications: {status['expired']}")
    return "\n".join(lines)
