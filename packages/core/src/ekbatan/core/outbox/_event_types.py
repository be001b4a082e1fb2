"""The simple-name guard: one event class per stored ``event_type``, per process.

Handlers subscribe to an ``event_type`` string, the class's simple name, so two classes
``billing.Created`` and ``orders.Created`` would be indistinguishable once stored. The first
class seen under a name owns it; another class with that name is refused with
:class:`EventTypeCollisionError`. "Another class" means another qualified name
(``module.QualName``): a class defined again under the same qualified name, as happens when a
module is reloaded, replaces the earlier definition instead of colliding with it.
"""

from __future__ import annotations

import threading

from ekbatan.core.outbox._errors import EventTypeCollisionError


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class EventTypeRegistry:
    """Event classes by simple name; thread-safe. :data:`default_event_types` is the process-wide one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, type] = {}

    def register(self, cls: type) -> str:
        """Claim ``cls.__name__`` for ``cls`` and return it; raise if another class owns that name."""
        name = cls.__name__
        with self._lock:
            known = self._by_name.get(name)
            if known is not None and known is not cls and qualified_name(known) != qualified_name(cls):
                raise EventTypeCollisionError(
                    f"Event type simple name collision: {name} maps to both {qualified_name(known)} "
                    f"and {qualified_name(cls)}. The stored event_type is the class's simple name, "
                    "so rename one of the classes"
                )
            self._by_name[name] = cls
        return name

    def lookup(self, event_type: str) -> type | None:
        """The class registered under ``event_type``, or ``None``."""
        with self._lock:
            return self._by_name.get(event_type)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._by_name)

    def __contains__(self, event_type: object) -> bool:
        with self._lock:
            return event_type in self._by_name

    def __repr__(self) -> str:
        return f"<EventTypeRegistry {len(self._by_name)} event type(s)>"


default_event_types = EventTypeRegistry()
"""The process-wide guard used unless a codec is given its own registry."""
