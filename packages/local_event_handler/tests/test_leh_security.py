"""Event payloads, action parameters and handler names holding quotes, ``;``, backslashes, NUL,
emoji and 10 kB strings reach the handler intact (or are refused when recorded) on every dialect."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from pipeline_support import RecordingHandler, executor_for, registry_of

from ekbatan.core import Action, ModelEvent, ShardedUUID, ShardIdentifier
from ekbatan.core.outbox import UtcClock
from ekbatan.local_event_handler import EventFanoutJob, EventHandlerRegistry, EventHandlingJob
from testsupport.sample_domain import Gadget

HOSTILE = {
    "quotes": 'it\'s "quoted" `back`',
    "statement": "x'; DROP TABLE events; --",
    "backslashes": "C:\\temp\\'\\\\",
    "nul": "before\x00after",
    "emoji": "🦄 naïve 漢字 🚀",
    "long": "ŝ;'\\" * 2_500,
}
HANDLER_NAME = "h'; DROP TABLE notifications; -- \\ 🦄"


class HostileEvent(ModelEvent):
    text: str
    by_key: dict[str, str]


@dataclass(frozen=True)
class RecordHostile:
    shard: ShardIdentifier
    text: str


class RecordHostileAction(Action[RecordHostile, uuid.UUID]):
    def perform(self, principal: Any, params: RecordHostile) -> uuid.UUID:
        gadget = Gadget(id=ShardedUUID.generate(params.shard), name="w", color="red")
        self.plan.add(gadget, HostileEvent(text=params.text, by_key={params.text: params.text}))
        return gadget.id


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_payloads_reach_the_handler_intact(one_shard, kind, dialect):
    value = HOSTILE[kind]
    registry = registry_of([one_shard])
    handler = RecordingHandler(HANDLER_NAME, HostileEvent)
    handlers = EventHandlerRegistry.builder().with_handlers([handler]).build()
    fanout = (
        EventFanoutJob.builder().database_registry(registry).event_handler_registry(handlers)
        .clock(UtcClock()).wakeups(False).build()
    )  # fmt: skip
    handling = (
        EventHandlingJob.builder().database_registry(registry).event_handler_registry(handlers)
        .clock(UtcClock()).wakeups(False).build()
    )  # fmt: skip
    try:
        try:
            executor_for(registry).execute(RecordHostileAction(), RecordHostile(one_shard.shard, value))
        except Exception as error:
            # PostgreSQL's json/text cannot hold NUL: refused when recorded, nothing half-stored.
            assert dialect == "postgres" and "\x00" in value, f"{kind}: {type(error).__name__}: {error}"
            assert "\\u0000" in str(error) or "NUL" in str(error) or "0x00" in str(error), str(error)
            assert one_shard.events() == [] and one_shard.rows(Gadget) == []
            return
        assert fanout.drain_one_round() is True
        assert handling.drain_one_round() is True
        [envelope] = handler.received
        assert envelope.event.text == value
        assert envelope.event.by_key == {value: value}
        assert envelope.action_params["text"] == value
        [row] = one_shard.notifications()
        assert (row.handler_name, row.state) == (HANDLER_NAME, "SUCCEEDED")
        assert handling.drain_one_round() is False
    finally:
        fanout.close()
        handling.close()
