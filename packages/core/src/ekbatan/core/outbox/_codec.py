"""``EventCodec``: events to JSON objects and back, and params to JSON objects.

The same codec should encode (when events are recorded) and decode (when handlers receive
them). It owns an :class:`EventTypeRegistry`, so encoding an event claims its simple name, and
a payload can be decoded by its stored ``event_type`` once its class was seen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from ekbatan.core.outbox._errors import InvalidEventError
from ekbatan.core.outbox._event_types import EventTypeRegistry, default_event_types
from ekbatan.core.outbox._events import ModelEvent
from ekbatan.core.outbox._params import params_to_json_object

E = TypeVar("E", bound=ModelEvent)


@dataclass(frozen=True)
class EncodedEvent:
    """What one event becomes in its row."""

    event_type: str
    model_id: str | None
    model_type: str | None
    payload: dict[str, Any]


class EventCodec:
    """Encode events (camelCase JSON objects) and params; decode payloads into event classes."""

    def __init__(self, event_types: EventTypeRegistry | None = None) -> None:
        self._event_types = default_event_types if event_types is None else event_types

    @property
    def event_types(self) -> EventTypeRegistry:
        return self._event_types

    def register(self, *event_classes: type[ModelEvent]) -> None:
        """Claim the simple names of ``event_classes`` now (a collision raises here, at start-up)."""
        for cls in event_classes:
            if not (isinstance(cls, type) and issubclass(cls, ModelEvent)):
                raise InvalidEventError(f"{cls!r} is not a ModelEvent subclass")
            self._event_types.register(cls)

    def encode(self, event: ModelEvent) -> EncodedEvent:
        if not isinstance(event, ModelEvent):
            raise InvalidEventError(
                f"events must be ModelEvent instances; got {type(event).__name__} {event!r:.80}"
            )
        event_type = self._event_types.register(type(event))
        try:
            payload = event.model_dump(mode="json", by_alias=True)
        except PydanticSerializationError as error:
            raise InvalidEventError(f"event {event_type} cannot be serialized to JSON: {error}") from error
        if not isinstance(payload, dict):
            raise InvalidEventError(
                f"event must serialize to a JSON object; {event_type} serialized to {type(payload).__name__}"
            )
        return EncodedEvent(event_type, event.model_id, event.model_name, payload)

    def encode_params(self, params: Any, *, action_name: str = "the action") -> dict[str, Any]:
        return params_to_json_object(params, action_name=action_name)

    def decode(self, payload: Mapping[str, Any] | str | bytes, event_class: type[E]) -> E:
        """``payload`` (a dict, or JSON text as some drivers return it) as an ``event_class``."""
        if isinstance(payload, str | bytes | bytearray):
            payload = json.loads(payload)
        if not isinstance(payload, Mapping):
            raise InvalidEventError(
                f"a {event_class.__name__} payload must be a JSON object; got {type(payload).__name__}"
            )
        try:
            return event_class.model_validate(payload)
        except ValidationError as error:
            raise InvalidEventError(f"payload does not decode as {event_class.__name__}: {error}") from error

    def decode_named(self, event_type: str, payload: Mapping[str, Any] | str | bytes) -> ModelEvent:
        """Decode by the stored ``event_type``; its class must have been registered or encoded before."""
        cls = self._event_types.lookup(event_type)
        if cls is None:
            raise LookupError(
                f"no event class is known for event_type {event_type!r}; import it and pass it to "
                "codec.register(...) (known: " + ", ".join(self._event_types.names()) + ")"
            )
        return self.decode(payload, cls)

    def __repr__(self) -> str:
        return f"<EventCodec {self._event_types!r}>"


default_codec = EventCodec()
"""The codec used when none is given: it shares the process-wide event-type guard."""
