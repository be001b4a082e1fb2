"""``Action``: one business operation, planned by ``perform`` and executed by ``ActionExecutor``.

``@action`` marks an ``Action`` subclass for discovery by the integrations (a class attribute,
nothing else); it refuses classes that are not actions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from ekbatan.core.outbox._marks import ClassMark
from ekbatan.core.outbox._plan import ActionPlan, current_plan

P = TypeVar("P")
R = TypeVar("R")
A = TypeVar("A", bound=type)

ACTION_MARKER = "__ekbatan_action__"


class Action(ABC, Generic[P, R]):
    """Subclass it and implement :meth:`perform`. ``P`` is the params type, ``R`` the result type.

    ``perform`` runs inside :meth:`ActionExecutor.execute`: it reads through
    ``self.plan.session()`` and plans its writes and events on ``self.plan``. The stored
    ``action_name`` is the class's simple name. One instance may run concurrently in several
    threads or tasks: each execution has its own plan.
    """

    @abstractmethod
    def perform(self, principal: Any, params: P) -> R:
        """Plan the changes and events for ``params`` on behalf of ``principal``; return a result."""

    @property
    def plan(self) -> ActionPlan:
        """The plan of the execution running in this thread or task."""
        return current_plan()

    @classmethod
    def action_name(cls) -> str:
        return cls.__name__


_MARK = ClassMark(
    ACTION_MARKER,
    Action,
    "action",
    "subclass ekbatan.core.outbox.Action and implement perform(principal, params)",
)


def action(cls: A) -> A:
    """Class decorator: mark an :class:`Action` subclass for discovery. Returns the class unchanged."""
    return _MARK.mark(cls)


def is_action(candidate: object) -> bool:
    """True for a class marked with ``@action`` itself (the mark is not inherited by subclasses)."""
    return _MARK.marked(candidate)
