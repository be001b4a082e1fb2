"""Observability hooks: listeners for scheduler and execution events, and interceptors that
wrap every execution. Listener callbacks run on the engine's own threads: keep them fast.
An exception raised by a listener is logged and swallowed; one raised by an interceptor is
the execution's failure."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete, TaskInstanceId

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting, ExecutionContext
    from ekbatan.distributed_jobs.scheduler._instances import TaskInstance
    from ekbatan.distributed_jobs.scheduler._tasks.completion import CompletionHandler
    from ekbatan.distributed_jobs.scheduler.schedules import MissedSlots

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.listener")


class SchedulerEventType(enum.Enum):
    UNEXPECTED_ERROR = "unexpected_error"
    FAILED_HEARTBEAT = "failed_heartbeat"
    COMPLETIONHANDLER_ERROR = "completionhandler_error"
    FAILUREHANDLER_ERROR = "failurehandler_error"
    DEAD_EXECUTION = "dead_execution"
    RAN_UPDATE_HEARTBEATS = "ran_update_heartbeats"
    RAN_DETECT_DEAD = "ran_detect_dead"
    RAN_EXECUTE_DUE = "ran_execute_due"
    #: an execution named by a PostgreSQL notification was claimed without a poll
    RAN_CLAIM_NOTIFIED = "ran_claim_notified"
    FAILED_MULTIPLE_HEARTBEATS = "failed_multiple_heartbeats"
    UNRESOLVED_TASK = "unresolved_task"


class CandidateEventType(enum.Enum):
    STALE = "stale"
    ALREADY_PICKED = "already_picked"
    EXECUTED = "executed"


class SchedulerListener:
    """Override what you need; every method is a no-op here."""

    def on_execution_scheduled(self, key: TaskInstanceId, execution_time: datetime) -> None: ...

    def on_execution_start(self, currently_executing: CurrentlyExecuting) -> None: ...

    def on_execution_complete(self, complete: ExecutionComplete) -> None: ...

    def on_execution_dead(self, execution: Execution) -> None: ...

    def on_execution_failed_heartbeat(self, currently_executing: CurrentlyExecuting) -> None: ...

    def on_scheduler_event(self, event: SchedulerEventType) -> None: ...

    def on_candidate_event(self, event: CandidateEventType) -> None: ...

    def on_slots_missed(self, execution: Execution, missed: MissedSlots) -> None:
        """Slots of a recurring execution that its misfire policy leaves unrun (after the row
        moved on to ``missed.next_time``)."""

    def on_poll(self, seconds: float, claimed: int) -> None:
        """A poll ended: how long it took and how many due executions it found (claimed, with
        lock-and-fetch; fetched for the workers to claim, with fetch)."""


_CALLBACKS = (
    "on_execution_scheduled",
    "on_execution_start",
    "on_execution_complete",
    "on_execution_dead",
    "on_execution_failed_heartbeat",
    "on_scheduler_event",
    "on_candidate_event",
    "on_slots_missed",
    "on_poll",
)


class Listeners(SchedulerListener):
    """Fans each callback out to every registered listener, isolating their failures."""

    def __init__(self, listeners: Sequence[SchedulerListener] = ()) -> None:
        self._listeners = tuple(listeners)
        # per callback, the listeners that implement it: a listener of one event (the execution
        # history hears completions only) costs the others nothing but this lookup
        self._by_method: dict[str, tuple[Any, ...]] = {
            name: tuple(
                getattr(listener, name)
                for listener in self._listeners
                if hasattr(listener, name)
                and (
                    not isinstance(listener, SchedulerListener)
                    or getattr(type(listener), name) is not getattr(SchedulerListener, name)
                )
            )
            for name in _CALLBACKS
        }

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def _each(self, method: str, *args: Any) -> None:
        for callback in self._by_method[method]:
            try:
                callback(*args)
            except Exception:
                log.exception("listener %r failed in %s", getattr(callback, "__self__", callback), method)

    def on_execution_scheduled(self, key: TaskInstanceId, execution_time: datetime) -> None:
        self._each("on_execution_scheduled", key, execution_time)

    def on_execution_start(self, currently_executing: CurrentlyExecuting) -> None:
        self._each("on_execution_start", currently_executing)

    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        self._each("on_execution_complete", complete)

    def on_execution_dead(self, execution: Execution) -> None:
        self._each("on_execution_dead", execution)

    def on_execution_failed_heartbeat(self, currently_executing: CurrentlyExecuting) -> None:
        self._each("on_execution_failed_heartbeat", currently_executing)

    def on_scheduler_event(self, event: SchedulerEventType) -> None:
        self._each("on_scheduler_event", event)

    def on_candidate_event(self, event: CandidateEventType) -> None:
        self._each("on_candidate_event", event)

    def on_slots_missed(self, execution: Execution, missed: MissedSlots) -> None:
        self._each("on_slots_missed", execution, missed)

    def on_poll(self, seconds: float, claimed: int) -> None:
        self._each("on_poll", seconds, claimed)


class ExecutionChain:
    """The rest of the interceptor chain; ``proceed`` runs it and returns the completion."""

    __slots__ = ("_interceptors", "_terminal")

    def __init__(
        self,
        interceptors: Sequence[ExecutionInterceptor],
        terminal: Callable[[TaskInstance[Any], ExecutionContext], CompletionHandler],
    ) -> None:
        self._interceptors = interceptors
        self._terminal = terminal

    def proceed(self, instance: TaskInstance[Any], ctx: ExecutionContext) -> CompletionHandler:
        if not self._interceptors:
            return self._terminal(instance, ctx)
        head, rest = self._interceptors[0], self._interceptors[1:]
        return head.execute(instance, ctx, ExecutionChain(rest, self._terminal))


class ExecutionInterceptor:
    """Wraps every execution; the first registered is outermost. Must call ``chain.proceed``."""

    def execute(
        self, instance: TaskInstance[Any], ctx: ExecutionContext, chain: ExecutionChain
    ) -> CompletionHandler:
        return chain.proceed(instance, ctx)


def each_of(*callbacks: Callable[..., None] | None) -> Callable[..., None] | None:
    """One callback calling each of ``callbacks`` that is set (None when none is)."""
    present = [c for c in callbacks if c is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def each(*args: Any) -> None:
        for callback in present:
            callback(*args)

    return each
