"""The marks that the discovery decorators leave for the integrations to find.

A mark is a value kept under a private attribute in an object's *own* ``__dict__``: a marked
class's subclasses are not marked unless they are marked too, and neither are its instances.

* :class:`ValueMark` puts a value and reads it back (the task decorators' ``TaskDefinition``,
  on a class or on the engine task a function became);
* :class:`ClassMark` is the marker of ``@distributed_job`` and ``@event_handler``: it accepts
  only subclasses of its base, refusing anything else with a message saying what to write.

``ekbatan.core`` keeps its own copy of :class:`ClassMark` for ``@action``, because neither
package may import the other.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["ClassMark", "ValueMark"]

V = TypeVar("V")
T = TypeVar("T")
C = TypeVar("C")


class ValueMark(Generic[V]):
    """A value of type ``kind`` that an object carries under ``attribute`` in its own ``__dict__``."""

    __slots__ = ("attribute", "kind")

    def __init__(self, attribute: str, kind: type[V]) -> None:
        self.attribute = attribute
        self.kind = kind

    def put(self, obj: T, value: V) -> T:
        """Mark ``obj`` (a class, or an object with a ``__dict__``) with ``value``; returns ``obj``."""
        setattr(obj, self.attribute, value)
        return obj

    def on(self, obj: object) -> V | None:
        """The value ``obj`` itself was marked with; None when it has none of its own (a subclass
        or an instance of a marked class) or holds something other than a ``kind``."""
        own = getattr(obj, "__dict__", None)
        found = own.get(self.attribute) if own is not None else None
        return found if isinstance(found, self.kind) else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.attribute!r})"


class ClassMark(ValueMark[bool]):
    """``@decorator``: marks subclasses of ``base`` and refuses anything else, adding ``hint``
    (what to write instead) to the message; ``marked(obj)`` is true for a class so marked."""

    __slots__ = ("base", "decorator", "hint")

    def __init__(self, attribute: str, base: type, decorator: str, hint: str) -> None:
        super().__init__(attribute, bool)
        self.base = base
        self.decorator = decorator
        self.hint = hint

    def mark(self, cls: C | None) -> C:
        """Mark ``cls``; returns it unchanged otherwise. ``None`` stands for ``@decorator()``,
        whose call has no class (a decorator that defaults its class to None reports it so)."""
        name, base = self.decorator, self.base.__name__
        if not isinstance(cls, type):
            raise TypeError(
                f"@{name} decorates {base} subclasses and takes no arguments; got {cls!r} "
                f"(write @{name}, not @{name}())"
            )
        if not issubclass(cls, self.base):
            raise TypeError(
                f"@{name} marks {base} subclasses; {cls.__module__}.{cls.__qualname__} is not one — {self.hint}"
            )
        return self.put(cls, True)

    def marked(self, obj: object) -> bool:
        """True for a class marked itself (not for its unmarked subclasses, nor for instances)."""
        return isinstance(obj, type) and self.on(obj) is True
