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

import click
import sqlalchemy as sa

from ekbatan.integrations.cli.app import Invocation, ekbatan_command, main
from ekbatan.integrations.cli.application import application_options, load_application
from ekbatan.integrations.cli.tables import format_age, render_table
from ekbatan.integrations.cli.targets import Shard
from ekbatan.integrations.pipeline_status import read_eventlog_status
from ekbatan.local_event_handler import REDRIVABLE_STATES, NotificationState, redrive_notifications

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


def shard_status(
    connection: sa.Connection, shard: Shard, now: datetime, handler_names: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``handler_names``: handlers listed even without a notification (with zero counts)."""
    status = read_eventlog_status(connection, shard.primary.dialect, shard.eventlog_schema, handler_names)
    return {
        "shard": shard.name,
        "dialect": shard.primary.dialect.value,
        "eventlog_schema": shard.eventlog_schema,
        "undelivered_events": {
            "count": status.undelivered_count,
            "oldest_age_seconds": _age(now, status.oldest_undelivered),
            "by_type": [
                {"event_type": u.event_type, "count": u.count, "oldest_age_seconds": _age(now, u.oldest)}
                for u in status.undelivered
            ],
        },
        "handlers": [
            {
                "handler": h.handler,
                **{state.lower(): h.counts[state] for state in _STATES},
                "most_attempts": h.most_attempts,
                "oldest_open_age_seconds": _age(now, h.oldest_open),
            }
            for h in status.handlers
        ],
        "expired": status.expired,
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


@ekbatan_command(events, "redrive")
@click.argument("handler")
@click.option("--failed", is_flag=True, help="The FAILED notifications (waiting for a retry).")
@click.option("--expired", is_flag=True, help="The EXPIRED notifications (given up on).")
@click.option(
    "--limit", type=click.IntRange(min=1), metavar="N", help="At most N notifications, over all shards."
)
def redrive_command(
    invocation: Invocation, handler: str, failed: bool, expired: bool, limit: int | None
) -> None:
    """Send HANDLER's failed and expired notifications back to PENDING, due now, on every shard
    (--failed or --expired: only those); the handling job calls the handler again at its next
    round, with a fresh retention window."""
    chosen = [state for state, on in zip(REDRIVABLE_STATES, (failed, expired), strict=True) if on]
    states = chosen or list(REDRIVABLE_STATES)
    target = invocation.target()
    shards: list[dict[str, Any]] = []
    for shard in target.shards:
        left = None if limit is None else limit - sum(s["redriven"] for s in shards)
        if left == 0:
            break
        provider = invocation.open(shard.primary)
        with shard.primary.connect(provider) as connection:
            target.require_eventlog(connection, shard)
        count = redrive_notifications(
            provider.engine, handler, states=states, eventlog_schema=shard.eventlog_schema, limit=left
        )
        shards.append({"shard": shard.name, "redriven": count})
    total = sum(s["redriven"] for s in shards)
    named = " or ".join(state.value for state in states)
    data = {"handler": handler, "states": [s.value for s in states], "redriven": total, "shards": shards}
    if total == 0:
        text = (
            f"no {named} notification of handler {handler} on any shard: nothing changed "
            "(ekbatan events status lists the handlers and their counts)"
        )
    else:
        per_shard = ", ".join(f"{s['shard']}: {s['redriven']}" for s in shards if s["redriven"])
        text = (
            f"{total} {named} notification(s) of handler {handler} back to PENDING, due now ({per_shard}); "
            "the handling job calls the handler at its next round"
        )
    invocation.emit(data, text)
