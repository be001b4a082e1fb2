"""``EventHandlerRegistry``: which handlers subscribe to which event type, and which handler a
stored ``handler_name`` (a current name or an alias) belongs to."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ekbatan.core.outbox import ModelEvent, qualified_name
from ekbatan.local_event_handler.handler import EventHandler


class EventHandlerRegistryBuilder:
    """Collects handlers; every check runs as each handler is added, before anything of it is
    registered, so a builder that refused a handler can still be used."""

    def __init__(self) -> None:
        self._by_name: dict[str, EventHandler[Any]] = {}
        self._event_classes: dict[str, type[ModelEvent]] = {}
        self._subscribers: dict[str, list[str]] = {}

    def with_handler(self, handler: EventHandler[Any]) -> EventHandlerRegistryBuilder:
        if handler is None:
            raise ValueError("handler cannot be None")
        if not isinstance(handler, EventHandler):
            raise TypeError(
                f"handlers must be EventHandler instances; got {type(handler).__name__} {handler!r:.80}"
            )
        cls = type(handler)
        where = f"{cls.__module__}.{cls.__qualname__}"
        name = handler.name()
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where} returned a blank name() ({name!r}); a handler name must be non-blank")
        event_class = handler.event_type()
        if event_class is None:
            raise ValueError(
                f"{where} returned None from event_type(); return the ModelEvent subclass it handles"
            )
        if not (isinstance(event_class, type) and issubclass(event_class, ModelEvent)):
            raise TypeError(f"{where}.event_type() must return a ModelEvent subclass; got {event_class!r}")
        type_name = event_class.event_type()
        if not type_name or not type_name.strip():
            raise ValueError(f"{where}.event_type() returned a class with a blank simple name")
        self._refuse_taken(name)
        known = self._event_classes.get(type_name)
        if (
            known is not None
            and known is not event_class
            and qualified_name(known) != qualified_name(event_class)
        ):
            raise ValueError(
                f"Event type simple name collision: {type_name} maps to both {qualified_name(known)} and "
                f"{qualified_name(event_class)}. The stored event_type is the class's simple name, so "
                "rename one of the classes"
            )
        aliases = list(handler.aliases())
        for alias in aliases:
            if not isinstance(alias, str) or not alias.strip():
                raise ValueError(f"{where} (handler {name!r}) returned a blank alias {alias!r}")
            if alias == name:
                raise ValueError(f"Handler alias duplicates canonical name: {name}")
            self._refuse_taken(alias)
        if len(set(aliases)) != len(aliases):
            raise ValueError(f"{where} (handler {name!r}) lists an alias twice: {aliases}")
        # every check passed: a refused handler leaves nothing of itself behind
        self._by_name[name] = handler
        for alias in aliases:
            self._by_name[alias] = handler
        self._event_classes[type_name] = event_class
        self._subscribers.setdefault(type_name, []).append(name)
        return self

    def with_handlers(self, handlers: Iterable[EventHandler[Any]]) -> EventHandlerRegistryBuilder:
        if handlers is None:
            raise ValueError("handlers cannot be None")
        for handler in handlers:
            self.with_handler(handler)
        return self

    def _refuse_taken(self, name: str) -> None:
        if name in self._by_name:
            raise ValueError(
                f"Handler name or alias already registered: {name} (handler names and aliases must be "
                "globally unique)"
            )

    def build(self) -> EventHandlerRegistry:
        return EventHandlerRegistry(
            dict(self._by_name),
            {t: tuple(names) for t, names in self._subscribers.items()},
            dict(self._event_classes),
        )


class EventHandlerRegistry:
    """Immutable once built: ``EventHandlerRegistry.builder().with_handler(h).build()``."""

    @staticmethod
    def builder() -> EventHandlerRegistryBuilder:
        return EventHandlerRegistryBuilder()

    def __init__(
        self,
        by_name: dict[str, EventHandler[Any]],
        subscribers: dict[str, tuple[str, ...]],
        event_classes: dict[str, type[ModelEvent]],
    ) -> None:
        self._by_name = by_name
        self._subscribers = subscribers
        self._event_classes = event_classes

    def subscribers_for(self, event_type: str) -> tuple[str, ...]:
        """The canonical names of the handlers of ``event_type`` (a simple name), in registration order."""
        return self._subscribers.get(event_type, ())

    def handled_event_types(self) -> tuple[str, ...]:
        """The simple names of the event types with at least one handler."""
        return tuple(self._subscribers)

    def handler_for(self, name_or_alias: str) -> EventHandler[Any] | None:
        return self._by_name.get(name_or_alias)

    def event_class(self, event_type: str) -> type[ModelEvent] | None:
        return self._event_classes.get(event_type)

    def handler_names(self) -> tuple[str, ...]:
        """Every canonical handler name, in registration order."""
        return tuple(n for names in self._subscribers.values() for n in names)

    def __len__(self) -> int:
        return sum(len(names) for names in self._subscribers.values())

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def __repr__(self) -> str:
        listed = ", ".join(f"{t}: {list(n)}" for t, n in self._subscribers.items())
        return f"<EventHandlerRegistry {{{listed}}}>"
