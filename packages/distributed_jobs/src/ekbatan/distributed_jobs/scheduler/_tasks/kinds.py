"""Task kinds: one-time, recurring (static schedule), recurring with a schedule stored per
instance, and custom. Built with :class:`Tasks`::

    send_mail = Tasks.one_time("send-mail", data_type=Mail).execute(lambda instance, ctx: ...)
    hourly = Tasks.recurring("hourly", Schedules.fixed_delay(timedelta(hours=1))).execute(fn)

A handler is ``fn(instance, ctx)``, a plain function or ``async def``. Returning normally is
success; raising is failure and goes to the task's failure handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ekbatan.distributed_jobs.scheduler._errors import ExecutionError, TaskInstanceCurrentlyExecutingError
from ekbatan.distributed_jobs.scheduler._execution import MAX_KEY_LENGTH
from ekbatan.distributed_jobs.scheduler._instances import SchedulableInstance, TaskInstance
from ekbatan.distributed_jobs.scheduler._table.held_rows import HoldState
from ekbatan.distributed_jobs.scheduler._table.rows import KEEP_DATA
from ekbatan.distributed_jobs.scheduler._tasks.completion import (
    CompletionHandler,
    OnCompleteRemove,
    OnCompleteReschedule,
    OnCompleteRescheduleFromData,
)
from ekbatan.distributed_jobs.scheduler._tasks.dead_execution import (
    DeadExecutionHandler,
)
from ekbatan.distributed_jobs.scheduler._tasks.failure import (
    FailureHandler,
)
from ekbatan.distributed_jobs.scheduler.schedules import MisfirePolicy, MissedSlots, Schedule

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
    from ekbatan.distributed_jobs.scheduler._context import ExecutionContext
    from ekbatan.distributed_jobs.scheduler._execution import Execution

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.tasks")

T = TypeVar("T")
Handler = Callable[[TaskInstance[Any], "ExecutionContext"], Any]

#: the single instance id of a static recurring task
RECURRING_INSTANCE = "recurring"

#: startup reconciliation leaves an existing row alone when it is due sooner than this
_STARTUP_GUARD = timedelta(seconds=10)
#: …and ignores differences within the timestamp precision of the dialects
_STARTUP_TOLERANCE = timedelta(seconds=1)


def check_task_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"task name must be a non-blank string, got {name!r}")
    if len(name) > MAX_KEY_LENGTH:
        raise ValueError(
            f"task name {name[:40]!r}… is {len(name)} characters, more than the {MAX_KEY_LENGTH} the "
            "scheduled_tasks table holds; choose a shorter name"
        )
    return name


def check_timeout(timeout: object) -> timedelta:
    if not isinstance(timeout, timedelta):
        raise TypeError(
            f"a task timeout must be a datetime.timedelta, not {type(timeout).__name__}; "
            "write e.g. timedelta(minutes=5)"
        )
    if timeout <= timedelta(0):
        raise ValueError(f"a task timeout must be positive, got {timeout!r}; write e.g. timedelta(minutes=5)")
    return timeout


class Task(Generic[T]):
    """Common parts of every task kind."""

    def __init__(
        self,
        name: str,
        data_type: Any,
        handler: Handler,
        failure_handler: FailureHandler,
        dead_execution_handler: DeadExecutionHandler,
        default_priority: int,
    ) -> None:
        self.name = check_task_name(name)
        self.data_type = data_type
        self.handler = handler
        self.failure_handler = failure_handler
        self.dead_execution_handler = dead_execution_handler
        self.default_priority = default_priority
        #: how long one run may take (None: no limit); set with the builder's ``timeout(...)``
        self.timeout: timedelta | None = None

    def instance(self, id: str, data: T | None = None, *, priority: int | None = None) -> TaskInstance[T]:
        return TaskInstance(
            self.name, id, data, priority=self.default_priority if priority is None else priority
        )

    def schedulable_instance(self, id: str, data: T | None = None) -> SchedulableInstance[T]:
        """An instance due "now" at the moment it is scheduled."""
        return SchedulableInstance(self.instance(id, data), lambda now: now)

    def completion_for(self, result: Any) -> CompletionHandler:
        """Turn what the handler returned into what happens to the row."""
        raise NotImplementedError

    def missed_at_start(self, execution: Execution, now: datetime) -> MissedSlots | None:
        """Before a run starts: the slots its misfire policy skips instead of running it (None:
        run it). Only recurring tasks have slots to miss."""
        return None

    def on_startup(self, client: SchedulerClient, now: datetime) -> None:
        """Called synchronously by ``Scheduler.start()`` for tasks given to ``start_tasks``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class OneTimeTask(Task[T]):
    """Any number of instances, each run once and then deleted."""

    def completion_for(self, result: Any) -> CompletionHandler:
        return _REMOVE


_REMOVE = OnCompleteRemove()


class RecurringTask(Task[T]):
    """One row (instance ``"recurring"``) moving from slot to slot of a fixed schedule."""

    def __init__(
        self,
        name: str,
        schedule: Schedule,
        data_type: Any,
        handler: Handler,
        failure_handler: FailureHandler,
        dead_execution_handler: DeadExecutionHandler,
        default_priority: int,
        initial_data: Any = None,
        schedule_on_startup: bool = True,
        stateful: bool = False,
        misfire: MisfirePolicy | None = None,
    ) -> None:
        if schedule is None:
            raise ValueError(f"recurring task {name!r} needs a schedule, got None")
        super().__init__(name, data_type, handler, failure_handler, dead_execution_handler, default_priority)
        self.schedule = schedule
        self.initial_data = initial_data
        self.schedule_on_startup = schedule_on_startup
        self.stateful = stateful
        self.misfire = misfire or MisfirePolicy.run_once()
        self._reschedule = (
            None if schedule.is_disabled else OnCompleteReschedule(schedule, misfire=self.misfire)
        )

    def default_instance(self) -> TaskInstance[T]:
        return self.instance(RECURRING_INSTANCE, self.initial_data)

    def completion_for(self, result: Any) -> CompletionHandler:
        if self.stateful:
            return OnCompleteReschedule(self.schedule, result, self.misfire)
        # None for a disabled schedule, whose row start-up removes: it has no next run to go to
        return self._reschedule  # type: ignore[return-value]

    def missed_at_start(self, execution: Execution, now: datetime) -> MissedSlots | None:
        return self.misfire.missed_at_start(self.schedule, execution.execution_time, now)

    def on_startup(self, client: SchedulerClient, now: datetime) -> None:
        if not self.schedule_on_startup:
            return
        key = (self.name, RECURRING_INSTANCE)
        existing = client.get_scheduled_execution(key)
        if self.schedule.is_disabled:
            if existing is not None:
                try:
                    client.cancel(key)
                    log.info("recurring task %s has a disabled schedule; removed its row", self.name)
                except TaskInstanceCurrentlyExecutingError:
                    log.warning(
                        "recurring task %s is disabled but currently executing; left as is", self.name
                    )
            return
        if existing is not None:
            new_time = self._reconciled_time(existing.execution_time, now)
            if new_time is not None:
                log.info(
                    "recurring task %s: schedule changed, moving next run from %s to %s",
                    self.name,
                    existing.execution_time.isoformat(),
                    new_time.isoformat(),
                )
                try:
                    client.reschedule(key, new_time)
                except ExecutionError as exc:
                    # Several instances starting together race for this; one winning is enough.
                    log.info("recurring task %s: another instance changed its row first (%s)", self.name, exc)
            return
        held = client.get_held_execution(self.name, RECURRING_INSTANCE)
        if held is not None:
            # Paused on its own (or kept as dead): out of scheduled_tasks but not gone. Scheduling
            # it anew would run what the operator stopped, and leave the held row unable to come
            # back (its key taken); resuming (or retrying) it puts it back.
            log.info(
                "recurring task %s is held (%s), so not scheduled at start-up; %s puts it back",
                self.name,
                held.state.value,
                f"ekbatan tasks {'resume' if held.state is HoldState.PAUSED else 'retry'} {self.name} {RECURRING_INSTANCE}",
            )
            return
        client.schedule_if_not_exists(self.default_instance(), self.schedule.initial_execution_time(now))

    def _reconciled_time(self, existing: datetime, now: datetime) -> datetime | None:
        """The new execution time implied by a changed schedule, or None to keep the row."""
        if existing < now + _STARTUP_GUARD:
            return None  # due soon or running: leave it
        if self.schedule.is_deterministic:
            candidate = self.schedule.next_execution_time(now)
            return candidate if abs(existing - candidate) > _STARTUP_TOLERANCE else None
        # Fixed delay: only ever move earlier, so frequent restarts cannot starve the task.
        candidate = self.schedule.next_execution_time(now)
        return candidate if existing > candidate else None


class RecurringTaskWithPersistentSchedule(Task[T]):
    """Many instances, each carrying its own schedule in its data (a ``ScheduleAndData``)."""

    def __init__(
        self,
        name: str,
        data_type: Any,
        handler: Handler,
        failure_handler: FailureHandler,
        dead_execution_handler: DeadExecutionHandler,
        default_priority: int,
        stateful: bool = False,
    ) -> None:
        super().__init__(name, data_type, handler, failure_handler, dead_execution_handler, default_priority)
        self.stateful = stateful

    def instance(self, id: str, data: T | None = None, *, priority: int | None = None) -> TaskInstance[T]:
        if data is None:
            raise ValueError(
                f"an instance of {self.name!r} needs data with a schedule, e.g. "
                "PlainScheduleAndData(Schedules.daily('12:00'), data)"
            )
        return super().instance(id, data, priority=priority)

    def schedulable_instance(self, id: str, data: T | None = None) -> SchedulableInstance[T]:
        instance = self.instance(id, data)

        def first_time(now: datetime) -> datetime:
            # read when scheduled, not now: the data may come from a supplier
            stored: Any = instance.data
            first: datetime = stored.schedule.initial_execution_time(now)
            return first

        return SchedulableInstance(instance, first_time)

    def completion_for(self, result: Any) -> CompletionHandler:
        return OnCompleteRescheduleFromData(result if self.stateful else KEEP_DATA)


class CustomTask(Task[T]):
    """The handler returns its own :class:`CompletionHandler` (remove, reschedule, replace…)."""

    def __init__(
        self,
        name: str,
        data_type: Any,
        handler: Handler,
        failure_handler: FailureHandler,
        dead_execution_handler: DeadExecutionHandler,
        default_priority: int,
        default_execution_time: Callable[[datetime], datetime] = lambda now: now,
        startup: tuple[str, Any, Callable[[datetime], datetime]] | None = None,
    ) -> None:
        super().__init__(name, data_type, handler, failure_handler, dead_execution_handler, default_priority)
        self.default_execution_time = default_execution_time
        self.startup = startup

    def schedulable_instance(self, id: str, data: T | None = None) -> SchedulableInstance[T]:
        return SchedulableInstance(self.instance(id, data), self.default_execution_time)

    def completion_for(self, result: Any) -> CompletionHandler:
        if not isinstance(result, CompletionHandler):
            raise TypeError(
                f"custom task {self.name!r} must return a completion handler such as OnCompleteRemove() or "
                f"OnCompleteReschedule(schedule), got {result!r}"
            )
        return result

    def on_startup(self, client: SchedulerClient, now: datetime) -> None:
        if self.startup is None:
            return
        instance_id, data, rule = self.startup
        client.schedule_if_not_exists(self.instance(instance_id, data), rule(now))
