"""The operator view's ``redrive`` action: one handler's ``FAILED`` and/or ``EXPIRED`` event
notifications sent back to ``PENDING``, due now, on every shard the view was given — an
:class:`EkbatanRuntime`'s, or those ``ekbatan ui`` opened (:mod:`.eventlog_shards`) —
with :func:`ekbatan.local_event_handler.redrive_notifications` on each shard's primary. A bare
``SchedulerClient`` knows the jobs table only, not the shards, so the action is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping

from ekbatan.integrations.operator.eventlog_shards import EventlogShards
from ekbatan.local_event_handler import REDRIVABLE_STATES, NotificationState, redrive_notifications

__all__ = ["RedriveRefused", "redrive_everywhere", "redrive_question"]

#: what the ``states`` field takes: the names, separated by commas or spaces
_STATES_FORMAT = "FAILED, EXPIRED or FAILED,EXPIRED (empty: both)"
_MAX_HANDLER_NAME = 255


class RedriveRefused(ValueError):
    """The form or the source does not allow the re-drive; the message says why (the action
    answers it 400)."""


def redrive_question(source: EventlogShards | None, params: Mapping[str, str]) -> str:
    handler, states, eventlog = _request(source, params)
    return (
        f"Send the {_named(states)} notifications of handler {handler} back to PENDING, due now, "
        f"on every shard ({len(eventlog.shards)})? The handler is called again at the handling job's next round."
    )


def redrive_everywhere(source: EventlogShards | None, params: Mapping[str, str]) -> str:
    """Re-drive on every shard; the message saying how many rows went back, per shard."""
    handler, states, eventlog = _request(source, params)
    counts = [
        (
            shard.name,
            redrive_notifications(
                shard.engine, handler, states=states, eventlog_schema=shard.eventlog_schema
            ),
        )
        for shard in eventlog.shards
    ]
    total = sum(count for _, count in counts)
    if total == 0:
        return f"No {_named(states, 'or')} notification of handler {handler} on any shard: nothing changed."
    per_shard = ", ".join(f"shard {shard}: {count}" for shard, count in counts if count)
    return (
        f"{total} {_named(states, 'or')} notification(s) of handler {handler} back to PENDING, due now "
        f"({per_shard}); the handling job calls the handler at its next round."
    )


def _request(
    source: EventlogShards | None, params: Mapping[str, str]
) -> tuple[str, tuple[NotificationState, ...], EventlogShards]:
    if source is None:
        raise RedriveRefused(
            "Re-driving notifications needs the application's shards: build the operator view from "
            "an EkbatanRuntime (operator_app(runtime)) or give them (operator_app(client, "
            "eventlog=...)); a SchedulerClient reaches the jobs table only."
        )
    handler = params.get("handler", "").strip()
    if not handler:
        raise RedriveRefused("No handler given: name the handler whose notifications go back.")
    if len(handler) > _MAX_HANDLER_NAME:
        raise RedriveRefused(f"The handler name is {len(handler)} characters; handler names are at most 255.")
    return handler, _states(params.get("states", "")), source


def _states(text: str) -> tuple[NotificationState, ...]:
    names = text.replace(",", " ").split()
    chosen: list[NotificationState] = []
    for name in names:
        state = next((s for s in REDRIVABLE_STATES if s.value == name.upper()), None)
        if state is None:
            shown = name if len(name) <= 40 else name[:40] + "…"
            raise RedriveRefused(
                f"States {shown!r}: only FAILED and EXPIRED notifications can be re-driven; write {_STATES_FORMAT}."
            )
        if state not in chosen:
            chosen.append(state)
    return tuple(chosen) or REDRIVABLE_STATES


def _named(states: tuple[NotificationState, ...], joined_by: str = "and") -> str:
    return f" {joined_by} ".join(state.value for state in states)
