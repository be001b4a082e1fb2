"""``@one_time_task`` and ``@recurring_task_with_persistent_schedule``: engine tasks that the
integrations discover in scanned packages, as they discover ``@distributed_job`` classes.

Two forms. On a module-level function ``(instance, ctx)`` the decorator returns the engine
:class:`~ekbatan.distributed_jobs.scheduler.Task` itself, so the function's name is what the
application schedules with::

    @one_time_task("send-receipt", data_type=Receipt)
    def send_receipt(instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None: ...

    client.schedule(send_receipt.instance("1045", Receipt(...)))

On a class with ``execute(self, instance, ctx)`` (a plain method or ``async def``) the class
stays a class: the integrations build it, injecting its constructor parameters as they do a
job's, and wrap it into an engine task. Subclassing :class:`TaskHandler` gives the class its
data type and the typed ``instance(...)`` / ``schedulable_instance(...)`` to schedule with::

    @one_time_task("send-receipt")
    class SendReceipt(TaskHandler[Receipt]):
        def __init__(self, mailer: Mailer) -> None: ...
        def execute(self, instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None: ...

    client.schedule(SendReceipt.instance("1045", Receipt(...)))

The decorators register nothing: they tag what they return, and ``build_runtime`` registers
what discovery found into the process's one scheduler. Without the integrations, pass the
function form's task to ``JobRegistryBuilder.with_tasks`` or to the engine directly.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, Unpack, overload

from ekbatan.distributed_jobs.marks import ValueMark
from ekbatan.distributed_jobs.scheduler import (
    DeadExecutionHandler,
    FailureHandler,
    MaxRetries,
    OneTimeTask,
    OnFailureDeadLetter,
    OnFailureRescheduleUsingTaskDataSchedule,
    OnFailureRetryLater,
    PlainScheduleAndData,
    RecurringTaskWithPersistentSchedule,
    SchedulableInstance,
    Task,
    TaskInstance,
    Tasks,
)

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler import ExecutionContext

__all__ = [
    "TaskDefinition",
    "TaskHandler",
    "TaskMarker",
    "TaskOptions",
    "one_time_task",
    "recurring_task_with_persistent_schedule",
    "task_definition_of",
]

T = TypeVar("T")
C = TypeVar("C", bound=type)
K = TypeVar("K", bound=Task[Any])
TaskKind = Literal["one-time", "recurring-with-persistent-schedule"]


class TaskOptions(TypedDict, total=False):
    """What the decorators accept beside the name and the data type. Anything else the
    engine's builders offer: build the task by hand and pass it as ``extra_tasks``.

    * ``priority`` — the default priority of the task's instances (the engine's defaults:
      50 for one-time, 90 for persistent-schedule tasks); it orders due executions only when
      the scheduler has ``enable_priority()``;
    * ``on_failure`` — an engine failure handler (``ExponentialBackoff(...)``,
      ``OnFailureRetryLater(delay)``, ``FailureHandlers.max_retries(n)...``); default: retry
      5 minutes later (one-time), the schedule's next time (persistent schedule);
    * ``max_retries`` — give up after this many retries and keep the instance as *dead*
      (``ekbatan tasks list --dead``; ``tasks retry`` sends it back); the retries themselves
      follow ``on_failure`` (or the default). To delete it instead, pass
      ``on_failure=FailureHandlers.max_retries(n).retry_every(...).then_remove()``;
    * ``on_dead_execution`` — ``ReviveDeadExecution()`` (the default: run it again) or
      ``CancelDeadExecution()`` (remove it) for an execution whose worker stopped heartbeating;
    * ``timeout`` — a ``timedelta`` after which a run ends as failed (an ``async`` body is
      cancelled; a thread body is told through ``ctx`` and its outcome discarded).
    """

    priority: int
    on_failure: FailureHandler
    max_retries: int
    on_dead_execution: DeadExecutionHandler
    timeout: timedelta


_OPTION_NAMES = frozenset(TaskOptions.__annotations__)


@dataclass(frozen=True, eq=False)
class TaskDefinition(Generic[T]):
    """What a task decorator was given, and where: the mark discovery reads."""

    kind: TaskKind
    name: str
    data_type: Any
    priority: int | None = None
    on_failure: FailureHandler | None = None
    max_retries: int | None = None
    on_dead_execution: DeadExecutionHandler | None = None
    timeout: timedelta | None = None
    #: ``module.qualname`` of the decorated function or class, for messages
    defined_as: str = ""
    #: the module the decorated function or class was defined in (discovery's "defined here")
    module: str = ""
    _prototype: Task[T] | None = field(default=None, repr=False)

    def build(self, handler: Callable[[TaskInstance[Any], ExecutionContext], Any]) -> Task[T]:
        """The engine task running ``handler``, with this definition's options and mark."""
        if self.kind == "one-time":
            builder: Any = Tasks.one_time(self.name, self.data_type)
            retry: FailureHandler = OnFailureRetryLater()
        else:
            builder = Tasks.recurring_with_persistent_schedule(self.name, self.data_type)
            retry = OnFailureRescheduleUsingTaskDataSchedule()
        if self.priority is not None:
            builder.default_priority(self.priority)
        failure = self.on_failure
        if self.max_retries is not None:
            # out of retries, the execution is kept as dead (listed, retried or cancelled by an
            # operator), not deleted: failed work never vanishes unseen
            failure = MaxRetries(self.max_retries, failure or retry, OnFailureDeadLetter())
        if failure is not None:
            builder.on_failure(failure)
        if self.on_dead_execution is not None:
            builder.on_dead_execution(self.on_dead_execution)
        if self.timeout is not None:
            builder.timeout(self.timeout)
        task: Task[T] = builder.execute(handler)
        return _MARK.put(task, self)

    @property
    def prototype(self) -> Task[T]:
        """A task of this definition that only makes instances (a class task's handle)."""
        if self._prototype is None:
            object.__setattr__(self, "_prototype", self.build(self._not_built))
        assert self._prototype is not None
        return self._prototype

    def _not_built(self, instance: TaskInstance[Any], ctx: ExecutionContext) -> None:
        # Only reachable when someone registers the prototype by hand: build_runtime builds the
        # class and registers a task of its own.
        raise RuntimeError(
            f"{self.defined_as} is a class task: it runs where build_runtime built it, not from its handle"
        )


#: where a task decorator leaves its definition: on the decorated class, or on the engine task a
#: decorated function became
_MARK: ValueMark[TaskDefinition[Any]] = ValueMark("__ekbatan_task__", TaskDefinition)


def task_definition_of(obj: Any) -> TaskDefinition[Any] | None:
    """The definition of a task made by a task decorator, or of a decorated class; else None.

    A class's mark is its own: a subclass of a decorated class is not a task until decorated.
    """
    return _MARK.on(obj) if isinstance(obj, type | Task) else None


class TaskHandler(Generic[T]):
    """Base of a class task: its type parameter is the task's data type, and its class methods
    make the instances to schedule. Decorate the subclass with a task decorator."""

    def execute(self, instance: TaskInstance[T], ctx: ExecutionContext) -> Awaitable[Any] | Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define execute(self, instance, ctx)")

    @classmethod
    def definition(cls) -> TaskDefinition[T]:
        found = task_definition_of(cls)
        if found is None:
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} is not a task: decorate it with @one_time_task(...) "
                "or @recurring_task_with_persistent_schedule(...)"
            )
        return found

    @classmethod
    def instance(cls, id: str, data: T | None = None, *, priority: int | None = None) -> TaskInstance[T]:
        """An instance of this task to schedule (``client.schedule(SendReceipt.instance(...))``)."""
        return cls.definition().prototype.instance(id, data, priority=priority)

    @classmethod
    def schedulable_instance(cls, id: str, data: T | None = None) -> SchedulableInstance[T]:
        """An instance with its first time: now (one-time), or the schedule in its data."""
        return cls.definition().prototype.schedulable_instance(id, data)


class TaskMarker(Generic[T, K]):
    """What ``@one_time_task(...)`` returns: applied to a function it gives the engine task,
    applied to a class it marks the class and returns it."""

    def __init__(self, kind: TaskKind, name: str, data_type: Any, options: TaskOptions) -> None:
        Tasks.one_time(name)  # the engine's check of the name, at import time
        unknown = sorted(set(options) - _OPTION_NAMES)
        if unknown:
            raise TypeError(f"unknown task option(s) {unknown}; the options are {sorted(_OPTION_NAMES)}")
        priority = options.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TypeError(f"task {name!r}: priority is an int, got {priority!r}")
        retries = options.get("max_retries")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValueError(f"task {name!r}: max_retries is an int of at least 0, got {retries!r}")
        failure = options.get("on_failure")
        if failure is not None and not callable(getattr(failure, "on_failure", None)):
            raise TypeError(
                f"task {name!r}: on_failure takes a failure handler such as ExponentialBackoff(...), "
                f"got {failure!r}"
            )
        dead = options.get("on_dead_execution")
        if dead is not None and not callable(getattr(dead, "dead_execution", None)):
            raise TypeError(
                f"task {name!r}: on_dead_execution takes ReviveDeadExecution() or CancelDeadExecution(), "
                f"got {dead!r}"
            )
        timeout = options.get("timeout")
        if timeout is not None:
            try:
                Tasks.one_time(name).timeout(timeout)  # the engine's own check
            except (TypeError, ValueError) as e:
                raise type(e)(f"task {name!r}: {e}") from None
        self._definition: TaskDefinition[T] = TaskDefinition(
            kind, name, data_type, priority, failure, retries, dead, timeout
        )

    @overload
    def __call__(self, target: C) -> C: ...

    @overload
    def __call__(self, target: Callable[[TaskInstance[T], ExecutionContext], Any]) -> K: ...

    def __call__(self, target: Any) -> Any:
        definition = self._definition
        where = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)!s}"
        if isinstance(target, type):
            definition = _with_class_data_type(definition, target, where)
            execute = getattr(target, "execute", None)
            if not callable(execute) or execute is TaskHandler.execute:
                raise TypeError(
                    f"task {definition.name!r} on {where}: a class task defines execute(self, instance, ctx)"
                )
            _check_arity(execute, 3, f"{where}.execute", "(self, instance, ctx)")
            definition = _placed(definition, where, target.__module__)
            _MARK.put(target, definition)
            if not issubclass(target, TaskHandler):
                # the handle TaskHandler gives, for a class that does not subclass it (untyped)
                for method in ("definition", "instance", "schedulable_instance"):
                    if method not in vars(target):
                        setattr(target, method, classmethod(vars(TaskHandler)[method].__func__))
            return target
        if not callable(target):
            raise TypeError(
                f"task {definition.name!r} decorates a function (instance, ctx) or a class with execute(...), "
                f"got {target!r}"
            )
        _check_arity(target, 2, where, "(instance, ctx)")
        return _placed(definition, where, getattr(target, "__module__", "")).build(target)


def _placed(definition: TaskDefinition[T], where: str, module: str) -> TaskDefinition[T]:
    return dataclasses.replace(definition, defined_as=where, module=module, _prototype=None)


def _with_class_data_type(definition: TaskDefinition[T], cls: type, where: str) -> TaskDefinition[T]:
    """A ``TaskHandler[Receipt]`` base gives the data type, so it is written once."""
    declared: Any = None
    for base in getattr(cls, "__orig_bases__", ()):
        if typing.get_origin(base) is TaskHandler:
            (declared,) = typing.get_args(base)
            if isinstance(declared, TypeVar):
                declared = None
    if declared is None:
        return definition
    given = definition.data_type
    if given is not None and given is not _DEFAULT_PERSISTENT and given != declared:
        raise TypeError(
            f"{where}: data_type={getattr(given, '__qualname__', given)} but the class is a "
            f"TaskHandler[{getattr(declared, '__qualname__', declared)}]; give the data type once"
        )
    return dataclasses.replace(definition, data_type=declared, _prototype=None)


def _check_arity(fn: Any, count: int, where: str, expected: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(count - 1 if inspect.ismethod(fn) else count))
    except TypeError:
        raise TypeError(f"{where}{signature} cannot take {expected}: the engine calls it so") from None


_DEFAULT_PERSISTENT = PlainScheduleAndData


@overload
def one_time_task(
    name: str, *, data_type: type[T], **options: Unpack[TaskOptions]
) -> TaskMarker[T, OneTimeTask[T]]: ...


@overload
def one_time_task(
    name: str, *, data_type: None = None, **options: Unpack[TaskOptions]
) -> TaskMarker[Any, OneTimeTask[Any]]: ...


def one_time_task(name: str, *, data_type: Any = None, **options: Unpack[TaskOptions]) -> Any:
    """Mark a function ``(instance, ctx)`` or a class with ``execute(self, instance, ctx)`` as
    a one-time task: any number of instances, each run once (by one process of the cluster)
    and deleted when it succeeds. ``data_type`` decodes the instances' data (a dataclass, a
    pydantic model, ``dict``…); for a class it may come from its ``TaskHandler[...]`` base.
    Options: :class:`TaskOptions`."""
    return TaskMarker("one-time", name, data_type, options)


@overload
def recurring_task_with_persistent_schedule(
    name: str, *, data_type: type[T], **options: Unpack[TaskOptions]
) -> TaskMarker[T, RecurringTaskWithPersistentSchedule[T]]: ...


@overload
def recurring_task_with_persistent_schedule(
    name: str, *, data_type: None = None, **options: Unpack[TaskOptions]
) -> TaskMarker[PlainScheduleAndData, RecurringTaskWithPersistentSchedule[PlainScheduleAndData]]: ...


def recurring_task_with_persistent_schedule(
    name: str, *, data_type: Any = None, **options: Unpack[TaskOptions]
) -> Any:
    """Mark a function or class as a recurring task whose instances each carry their own
    schedule in their data (a ``ScheduleAndData``: ``PlainScheduleAndData(schedule, data)``,
    the default data type, or ``PersistentCronSchedule``). Each instance runs at its schedule's
    times until it is cancelled; schedule one with ``task.schedulable_instance(id, data)``."""
    return TaskMarker(
        "recurring-with-persistent-schedule",
        name,
        _DEFAULT_PERSISTENT if data_type is None else data_type,
        options,
    )
