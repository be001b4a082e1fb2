"""``EventEnvelope``: one event as a handler receives it, with the action that caused it.

Built once per delivery, right before the handler runs. Deliberately absent: the
notification's id, attempts, next retry time and state — a handler must behave the same on
its first and its fifth try, and ``event_id`` is all it needs to recognise a repeat.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Generic, TypeVar

from ekbatan.core.outbox import ModelEvent

E = TypeVar("E", bound=ModelEvent)

_OPTIONAL = frozenset({"model_id", "model_type"})


@dataclass(frozen=True, slots=True, kw_only=True)
class EventEnvelope(Generic[E]):
    """``event_id`` is the row id in ``eventlog.events``: the same on every retry, the key to
    deduplicate on. ``action_params`` is the action's params as the JSON object stored."""

    event: E
    event_id: uuid.UUID
    namespace: str
    action_id: uuid.UUID
    action_name: str
    action_params: dict[str, Any]
    started_date: datetime
    completion_date: datetime
    model_id: str | None = None
    model_type: str | None = None
    event_date: datetime

    def __post_init__(self) -> None:
        missing = [f.name for f in fields(self) if f.name not in _OPTIONAL and getattr(self, f.name) is None]
        if missing:
            raise ValueError(f"an EventEnvelope needs {', '.join(missing)}; got None")
        if not isinstance(self.event, ModelEvent):
            raise TypeError(f"EventEnvelope.event must be a ModelEvent; got {type(self.event).__name__}")
