"""``ActionPlan``: what one action execution will change and which events it emits.

``perform`` plans; the executor applies the plan when ``perform`` returns. Nothing planned is
written before that, so a plan that turns out to span two shards is refused before any write,
and an exception in ``perform`` leaves the databases untouched.

Reading is immediate: ``plan.session(shard)`` is the ORM ``Session`` of that shard's
transaction, the very session the planned changes are later flushed through. Objects loaded
with it can be modified and passed to ``plan.update``; they are written in the same
transaction as the events.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session, object_session
from sqlalchemy.sql.base import Executable

from ekbatan.core.outbox._errors import InvalidEventError, NoActionRunningError
from ekbatan.core.outbox._events import ModelEvent
from ekbatan.core.outbox._routing import instance_identity, instance_shard, orm_mapper, shard_from_value
from ekbatan.core.outbox._transactions import ShardTransactions
from ekbatan.core.sharding._registry import DatabaseRegistry
from ekbatan.core.sharding._shard_identifier import ShardIdentifier

T = TypeVar("T")

_current_plan: ContextVar[ActionPlan | None] = ContextVar("ekbatan_current_action_plan", default=None)


def current_plan() -> ActionPlan:
    """The plan of the action running in this thread or task (inside ``perform``)."""
    plan = _current_plan.get()
    if plan is None:
        raise NoActionRunningError(
            "no action is running here: the ActionPlan exists only while ActionExecutor.execute() "
            "runs an action's perform()"
        )
    return plan


@contextmanager
def bind_plan(plan: ActionPlan) -> Iterator[ActionPlan]:
    token = _current_plan.set(plan)
    try:
        yield plan
    finally:
        _current_plan.reset(token)


ChangeKind = Literal["add", "update", "delete", "execute"]


@dataclass
class PlannedChange:
    kind: ChangeKind
    target: Any
    shard: ShardIdentifier | None
    sequence: int
    parameters: Any = None
    expected_rowcount: int | None = None


@dataclass
class PlannedEvent:
    event: ModelEvent
    source: PlannedChange | None
    shard: ShardIdentifier | None
    sequence: int


@dataclass
class ShardWork:
    """Everything the plan writes on one shard, in the order it was planned."""

    shard: ShardIdentifier
    changes: list[PlannedChange] = field(default_factory=list)
    events: list[PlannedEvent] = field(default_factory=list)


class ActionPlan:
    """The staged changes and events of one execution; reach it as ``self.plan`` inside ``perform``."""

    def __init__(
        self,
        registry: DatabaseRegistry,
        transactions: ShardTransactions,
        *,
        action_name: str,
        action_id: uuid.UUID,
        namespace: str,
        started_date: datetime,
    ) -> None:
        self._registry = registry
        self._transactions = transactions
        self._changes: list[PlannedChange] = []
        self._events: list[PlannedEvent] = []
        self._sequence = itertools.count()
        self._sealed = False
        self.action_name = action_name
        self.action_id = action_id
        self.namespace = namespace
        self.started_date = started_date

    # --- reading ------------------------------------------------------------------------------

    def session(self, shard: ShardIdentifier | None = None) -> Session:
        """The ORM session of ``shard``'s transaction (the default shard when ``None``).

        An unregistered shard means the default shard, as for writes. The transaction opens
        on first use and ends with the action: committed with the plan, or rolled back.
        """
        return self._transactions.session(self._registry.effective_shard(shard))

    def connection(self, shard: ShardIdentifier | None = None) -> sa.Connection:
        """The Core connection under :meth:`session` (same transaction)."""
        return self.session(shard).connection()

    # --- planning -----------------------------------------------------------------------------

    def add(self, instance: T, *events: ModelEvent, shard: ShardIdentifier | None = None) -> T:
        """Insert an ORM instance; ``events`` are about it (their model id/name are filled from it)."""
        self._stage("add", instance, events, shard)
        return instance

    def update(self, instance: T, *events: ModelEvent, shard: ShardIdentifier | None = None) -> T:
        """Write the changes made to an ORM instance (loaded through :meth:`session`, or detached)."""
        self._stage("update", instance, events, shard)
        return instance

    def delete(self, instance: object, *events: ModelEvent, shard: ShardIdentifier | None = None) -> None:
        """Delete a persistent (or detached) ORM instance."""
        self._stage("delete", instance, events, shard)

    def execute(
        self,
        statement: Executable,
        parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        shard: ShardIdentifier | None = None,
        expected_rowcount: int | None = None,
    ) -> None:
        """Run a Core statement (``insert``, ``update``, ``delete``, ``text``) when the plan is applied.

        It goes to ``shard`` (the default shard when ``None``), in planned order with the ORM
        changes of that shard. With ``expected_rowcount`` a different number of affected rows
        raises :class:`UnexpectedRowCountError` and rolls the whole action back.
        """
        self._check_open()
        if not isinstance(statement, Executable):
            raise TypeError(
                f"plan.execute takes a SQLAlchemy statement (sa.insert/update/delete/text); "
                f"got {type(statement).__name__}"
            )
        self._changes.append(
            PlannedChange(
                "execute",
                statement,
                shard,
                next(self._sequence),
                parameters=parameters,
                expected_rowcount=expected_rowcount,
            )
        )

    def emit(self, *events: ModelEvent, shard: ShardIdentifier | None = None) -> None:
        """Record events not attached to a planned change.

        Each goes to ``shard`` when given; else to the shard of a planned ORM instance with the
        same model name and id; else to the shard in its ``model_id`` when that is a
        ``ShardedUUID``; else to the default shard.
        """
        self._check_open()
        for planned in events:
            _check_event(planned)
            self._events.append(PlannedEvent(planned, None, shard, next(self._sequence)))

    @property
    def events(self) -> tuple[ModelEvent, ...]:
        """The events planned so far (attached ones first filled in when the plan is applied)."""
        return tuple(p.event for p in sorted(self._events, key=lambda p: p.sequence))

    @property
    def changes(self) -> int:
        """How many changes (ORM instances and statements) are planned."""
        return len(self._changes)

    # --- resolution (used by the executor) ----------------------------------------------------

    def seal(self) -> None:
        self._sealed = True

    def work_by_shard(self) -> dict[ShardIdentifier, ShardWork]:
        """The planned work grouped by (effective) shard, in registry order."""
        work: dict[ShardIdentifier, ShardWork] = {}

        def bucket(shard: ShardIdentifier) -> ShardWork:
            return work.setdefault(shard, ShardWork(shard))

        change_shards: dict[int, ShardIdentifier] = {}
        model_shards: dict[tuple[str, str], ShardIdentifier] = {}
        for change in self._changes:
            shard = self._change_shard(change)
            change_shards[id(change)] = shard
            bucket(shard).changes.append(change)
            if change.kind != "execute":
                model_id, model_name = instance_identity(change.target)
                if model_id is not None:
                    model_shards.setdefault((model_name, model_id), shard)
        for planned in self._events:
            if planned.source is not None:
                shard = change_shards[id(planned.source)]
            elif planned.shard is not None:
                shard = self._registry.effective_shard(planned.shard)
            else:
                key = (planned.event.model_name or "", planned.event.model_id or "")
                shard = model_shards.get(key) or self._registry.effective_shard(
                    shard_from_value(planned.event.model_id)
                )
            bucket(shard).events.append(planned)
        order = {shard: index for index, shard in enumerate(self._registry.shards)}
        return dict(sorted(work.items(), key=lambda item: order[item[0]]))

    def _change_shard(self, change: PlannedChange) -> ShardIdentifier:
        if change.shard is not None:
            return self._registry.effective_shard(change.shard)
        if change.kind == "execute":
            return self._registry.default_shard
        attached = self._transactions.shard_of(object_session(change.target))
        if attached is not None:
            return attached
        return self._registry.effective_shard(instance_shard(change.target))

    def _stage(
        self, kind: ChangeKind, instance: object, events: Sequence[ModelEvent], shard: ShardIdentifier | None
    ) -> None:
        self._check_open()
        if orm_mapper(instance) is None:
            raise TypeError(
                f"plan.{kind} takes an instance of a SQLAlchemy ORM-mapped class; got "
                f"{type(instance).__name__}. Use plan.execute(...) for Core statements"
            )
        for planned in events:
            _check_event(planned)
        change = PlannedChange(kind, instance, shard, next(self._sequence))
        self._changes.append(change)
        for planned in events:
            self._events.append(PlannedEvent(planned, change, None, next(self._sequence)))

    def _check_open(self) -> None:
        if self._sealed:
            raise RuntimeError(
                f"the plan of {self.action_name} is closed: perform() has returned, so nothing more can be planned"
            )

    def __repr__(self) -> str:
        return (
            f"<ActionPlan {self.action_name} {self.action_id} "
            f"changes={len(self._changes)} events={len(self._events)}>"
        )


def _check_event(candidate: object) -> None:
    if not isinstance(candidate, ModelEvent):
        raise InvalidEventError(
            f"events must be ModelEvent instances; got {type(candidate).__name__} {candidate!r:.80}"
        )
