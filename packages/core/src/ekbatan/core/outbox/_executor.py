"""``ActionExecutor``: run one action in one transaction per shard, with its events.

The steps of :meth:`ActionExecutor.execute`:

1. render the params as a JSON object (refused before ``perform`` runs if they are not one);
2. ``started_date = clock.now()``; run ``perform(principal, params)`` with a fresh plan;
3. group the planned work by shard (see :mod:`ekbatan.core.outbox._routing`); more than one
   shard without ``allow_cross_shard=True`` raises :class:`CrossShardError` before anything is
   written; no work at all still means the default shard (for its sentinel row);
4. ``completion_date = clock.now()``; on each shard, in registry order: apply the changes in
   planned order, flush, and write that shard's event rows (or one sentinel row) through the
   same connection;
5. commit. Any exception before the commit rolls back every shard; nothing is stored.

Cross-shard executions commit the shards one after another, with no two-phase commit: if a
later commit fails, the earlier ones stay committed and :class:`PartiallyCommittedError` says
which (it is also logged at CRITICAL).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from ekbatan.core.outbox._actions import Action
from ekbatan.core.outbox._clock import Clock, UtcClock, utc_now
from ekbatan.core.outbox._codec import EventCodec, default_codec
from ekbatan.core.outbox._errors import ActionNotRegisteredError, CrossShardError, UnexpectedRowCountError
from ekbatan.core.outbox._events import ModelEvent
from ekbatan.core.outbox._namespaces import validate_namespace
from ekbatan.core.outbox._plan import ActionPlan, PlannedEvent, ShardWork, bind_plan
from ekbatan.core.outbox._recording import RecordedAction, write_action_rows
from ekbatan.core.outbox._routing import instance_identity
from ekbatan.core.outbox._tracing import SCOPE, ActionTracing, sdk_tracer_provider
from ekbatan.core.outbox._transactions import ShardTransactions
from ekbatan.core.sharding._registry import DatabaseRegistry
from ekbatan.core.sharding._shard_identifier import ShardIdentifier

log = logging.getLogger("ekbatan.core.outbox.executor")

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ActionOutcome(Generic[R]):
    """What :meth:`ActionExecutor.execute_with_outcome` returns: the result and what was stored."""

    result: R
    action_id: uuid.UUID
    action_name: str
    started_date: datetime
    completion_date: datetime
    records: dict[ShardIdentifier, RecordedAction] = field(default_factory=dict)

    @property
    def shards(self) -> tuple[ShardIdentifier, ...]:
        return tuple(self.records)


class ActionExecutor:
    """Runs actions against a :class:`DatabaseRegistry`, writing their events to each shard's outbox.

    ``namespace`` (a dotted identifier such as ``wallet``) is stored on every row. ``clock``
    is any object with ``now()`` returning an aware datetime (UTC wall clock by default).
    ``codec`` encodes params and events (the process-wide one by default). ``actions`` are
    instances that ``execute(SomeAction, ...)`` may name by class; an instance can always be
    passed directly. ``tracing`` runs each action in a span (``action <Name>``) whose context is
    kept with its events, so that the spans of their handlers link to it (``opentelemetry-api``;
    ``tracer_provider`` defaults to OpenTelemetry's global one, a no-op — and then nothing is
    built — until the application installs an SDK's).
    """

    def __init__(
        self,
        database_registry: DatabaseRegistry,
        *,
        namespace: str,
        clock: Clock | None = None,
        codec: EventCodec | None = None,
        actions: Iterable[Action[Any, Any]] = (),
        tracing: bool = False,
        tracer_provider: Any = None,
    ) -> None:
        self._registry = database_registry
        self._tracing: ActionTracing | None = None
        if tracing:
            provider = sdk_tracer_provider(tracer_provider)
            if provider is not None:
                self._tracing = ActionTracing(provider.get_tracer(SCOPE))
        self._namespace = validate_namespace(namespace)
        self._clock = UtcClock() if clock is None else clock
        self._codec = default_codec if codec is None else codec
        self._actions: dict[type, Action[Any, Any]] = {}
        for instance in actions:
            self.register(instance)

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def database_registry(self) -> DatabaseRegistry:
        return self._registry

    @property
    def codec(self) -> EventCodec:
        return self._codec

    def register(self, instance: Action[Any, Any]) -> None:
        """Make ``instance`` the one ``execute(type(instance), ...)`` runs."""
        if not isinstance(instance, Action):
            raise TypeError(f"actions must be Action instances; got {type(instance).__name__}")
        self._actions[type(instance)] = instance

    @overload
    def execute(
        self,
        action: Action[P, R],
        params: P,
        *,
        principal: Any = None,
        allow_cross_shard: bool = False,
    ) -> R: ...

    @overload
    def execute(
        self,
        action: type[Action[P, R]],
        params: P,
        *,
        principal: Any = None,
        allow_cross_shard: bool = False,
    ) -> R: ...

    def execute(
        self,
        action: Action[P, R] | type[Action[P, R]],
        params: P,
        *,
        principal: Any = None,
        allow_cross_shard: bool = False,
    ) -> R:
        """Run ``action`` with ``params``; return what its ``perform`` returned."""
        return self.execute_with_outcome(
            action, params, principal=principal, allow_cross_shard=allow_cross_shard
        ).result

    def execute_with_outcome(
        self,
        action: Action[P, R] | type[Action[P, R]],
        params: P,
        *,
        principal: Any = None,
        allow_cross_shard: bool = False,
    ) -> ActionOutcome[R]:
        """As :meth:`execute`, also returning the action id, dates and the rows written per shard."""
        instance = self._resolve(action)
        name = type(instance).__name__
        action_id = uuid.uuid4()
        if self._tracing is None:
            return self._run(instance, name, action_id, params, principal, allow_cross_shard)
        with self._tracing.span(name, action_id, self._namespace):
            return self._run(instance, name, action_id, params, principal, allow_cross_shard)

    # --- internals ----------------------------------------------------------------------------

    def _run(
        self,
        instance: Action[P, R],
        name: str,
        action_id: uuid.UUID,
        params: P,
        principal: Any,
        allow_cross_shard: bool,
    ) -> ActionOutcome[R]:
        params_json = self._codec.encode_params(params, action_name=name)
        started = utc_now(self._clock)
        began = time.perf_counter()
        transactions = ShardTransactions(self._registry)
        plan = ActionPlan(
            self._registry,
            transactions,
            action_name=name,
            action_id=action_id,
            namespace=self._namespace,
            started_date=started,
        )
        records: dict[ShardIdentifier, RecordedAction] = {}
        try:
            with bind_plan(plan):
                result = instance.perform(principal, params)
            plan.seal()
            work = self._work(plan, transactions)
            if len(work) > 1:
                if not allow_cross_shard:
                    raise CrossShardError(name, list(work), [self._registry.shard_name(s) for s in work])
                log.warning(
                    "%s %s writes to %d shards (%s), each in its own transaction (no two-phase commit)",
                    name,
                    action_id,
                    len(work),
                    ", ".join(map(str, work)),
                )
            completion = utc_now(self._clock)
            for shard, shard_work in work.items():
                records[shard] = self._apply(
                    transactions, shard_work, name, action_id, params_json, started, completion
                )
        except BaseException as error:
            transactions.rollback_all(error)
            raise
        transactions.commit_all(action_name=name, action_id=action_id)
        log.debug(
            "%s %s committed on %s in %.1f ms",
            name,
            action_id,
            ", ".join(map(str, records)),
            (time.perf_counter() - began) * 1000,
        )
        return ActionOutcome(result, action_id, name, started, completion, records)

    def _resolve(self, action: Action[P, R] | type[Action[P, R]]) -> Action[P, R]:
        if isinstance(action, Action):
            return action
        if isinstance(action, type) and issubclass(action, Action):
            try:
                return self._actions[action]
            except KeyError:
                raise ActionNotRegisteredError(
                    f"{action.__name__} is not registered with this ActionExecutor; pass an instance "
                    f"to execute(), or register one with actions=[{action.__name__}(...)]"
                ) from None
        raise TypeError(f"execute() takes an Action instance or class; got {type(action).__name__}")

    def _work(self, plan: ActionPlan, transactions: ShardTransactions) -> dict[ShardIdentifier, ShardWork]:
        work = plan.work_by_shard()
        for shard in transactions.written_shards():  # writes made directly through a session
            work.setdefault(shard, ShardWork(shard))
        if not work:
            shard = self._registry.default_shard
            work[shard] = ShardWork(shard)
        order = {shard: index for index, shard in enumerate(self._registry.shards)}
        return dict(sorted(work.items(), key=lambda item: order[item[0]]))

    def _apply(
        self,
        transactions: ShardTransactions,
        work: ShardWork,
        action_name: str,
        action_id: uuid.UUID,
        params_json: dict[str, Any],
        started: datetime,
        completion: datetime,
    ) -> RecordedAction:
        opened = transactions.open(work.shard)
        session = opened.session
        for change in work.changes:
            if change.kind == "add":
                session.add(change.target)
            elif change.kind == "update":
                if change.target not in session:
                    session.add(change.target)
            elif change.kind == "delete":
                session.delete(change.target)
            else:
                session.flush()
                if change.parameters is None:
                    result = session.execute(change.target)
                else:
                    result = session.execute(change.target, change.parameters)
                if change.expected_rowcount is not None:
                    rowcount = getattr(result, "rowcount", -1)
                    if rowcount != change.expected_rowcount:
                        raise UnexpectedRowCountError(change.target, change.expected_rowcount, rowcount)
        ordered = sorted(work.events, key=lambda p: p.sequence)
        # Deleted instances are identified before the flush; the others after it, so keys
        # generated by the database are known.
        identified = {
            id(p): _filled(p) for p in ordered if p.source is not None and p.source.kind == "delete"
        }
        session.flush()
        events = [identified.get(id(p)) or _filled(p) for p in ordered]
        manager = self._registry.transaction_manager(work.shard)
        recorded = write_action_rows(
            session.connection(),
            events,
            namespace=self._namespace,
            action_id=action_id,
            action_name=action_name,
            params_json=params_json,
            started_date=started,
            completion_date=completion,
            eventlog_schema=manager.eventlog_schema,
            codec=self._codec,
            dialect=manager.dialect,
        )
        carrier = None if self._tracing is None or recorded.sentinel else self._tracing.carrier()
        if carrier is not None and self._tracing is not None:
            self._tracing.keep(
                session.connection(),
                dialect=manager.dialect,
                schema=manager.eventlog_schema,
                action_id=action_id,
                carrier=carrier,
                recorded=completion,
            )
        return recorded

    def __repr__(self) -> str:
        return f"<ActionExecutor namespace={self._namespace!r} {self._registry!r}>"


def _filled(planned: PlannedEvent) -> ModelEvent:
    event = planned.event
    source = planned.source
    if source is None or (event.model_id is not None and event.model_name is not None):
        return event
    model_id, model_name = instance_identity(source.target)
    update: dict[str, Any] = {}
    if event.model_id is None:
        update["model_id"] = model_id
    if event.model_name is None:
        update["model_name"] = model_name
    return event.model_copy(update=update)
