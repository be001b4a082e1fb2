"""``EventHandler``: in-process code that reacts to one type of outbox event, and the
``@event_handler`` marker that lets the integrations discover it."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ekbatan.core.outbox import ModelEvent
from ekbatan.distributed_jobs.marks import ClassMark

if TYPE_CHECKING:
    from ekbatan.local_event_handler.envelope import EventEnvelope

E = TypeVar("E", bound=ModelEvent)
H = TypeVar("H", bound=type)


class EventHandler(abc.ABC, Generic[E]):
    """Subclass it, implement ``name()``, ``event_type()`` and ``handle(envelope)``.

    * ``name()`` — the durable subscription id, written into every notification row the
      fan-out creates for this handler. Treat it as schema: renaming it orphans the rows
      already written under the old name unless the old name stays in ``aliases()``.
    * ``aliases()`` — former names, used only to find this handler for rows written under
      them. The fan-out never writes an alias.
    * ``event_type()`` — the :class:`~ekbatan.core.outbox.ModelEvent` subclass handled; the
      subscription is by its simple name, the stored ``event_type``.
    * ``handle(envelope)`` — a plain method or ``async def``. Returning means delivered;
      raising means failed, retried with backoff until the retention window ends. Delivery is
      at least once: use ``envelope.event_id`` to make it idempotent.
    """

    @abc.abstractmethod
    def name(self) -> str: ...

    def aliases(self) -> Iterable[str]:
        return ()

    @abc.abstractmethod
    def event_type(self) -> type[E]: ...

    @abc.abstractmethod
    def handle(self, envelope: EventEnvelope[E]) -> Awaitable[None] | None: ...

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__}>"


_MARK = ClassMark(
    "__ekbatan_event_handler__",
    EventHandler,
    "event_handler",
    "subclass ekbatan.local_event_handler.EventHandler",
)


def event_handler(cls: H | None = None) -> H:
    """Mark an :class:`EventHandler` subclass for discovery by the integrations.

    Registers nothing and creates nothing: it only tags the class. A subclass of a marked
    class is not marked unless it is marked too. ``@event_handler()`` (no class) is refused.
    """
    return _MARK.mark(cls)


def is_event_handler(obj: Any) -> bool:
    """True for a class marked with ``@event_handler`` itself (not for its unmarked subclasses)."""
    return _MARK.marked(obj)
