"""``ClassMark``: the marker of ``@action``, core's copy of ``ekbatan.distributed_jobs.marks.ClassMark``.

Core and ``ekbatan.distributed_jobs`` may not import each other, so this is the one other copy
of the mechanism (only its plain marks: core has no value-carrying mark). Keep the two alike:
the integrations' tests check that they mark, refuse and word their errors the same way.
"""

from __future__ import annotations

from typing import TypeVar

C = TypeVar("C")


class ClassMark:
    """``@decorator``: marks subclasses of ``base`` with ``True`` under ``attribute`` in the
    class's own ``__dict__`` (not inherited by subclasses), refuses anything else adding ``hint``
    (what to write instead) to the message; ``marked(obj)`` is true for a class so marked."""

    __slots__ = ("attribute", "base", "decorator", "hint")

    def __init__(self, attribute: str, base: type, decorator: str, hint: str) -> None:
        self.attribute = attribute
        self.base = base
        self.decorator = decorator
        self.hint = hint

    def mark(self, cls: C | None) -> C:
        """Mark ``cls``; returns it unchanged otherwise. ``None`` stands for ``@decorator()``."""
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
        setattr(cls, self.attribute, True)
        return cls

    def marked(self, obj: object) -> bool:
        """True for a class marked itself (not for its unmarked subclasses, nor for instances)."""
        return isinstance(obj, type) and obj.__dict__.get(self.attribute) is True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.attribute!r})"
