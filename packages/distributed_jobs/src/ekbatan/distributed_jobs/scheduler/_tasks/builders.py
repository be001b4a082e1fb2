"""The builders of :class:`Tasks`: a task's name and data type first, then its failure,
dead-execution and priority options, and last its handler (``execute``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ekbatan.distributed_jobs.scheduler._execution import PRIORITY_HIGH, PRIORITY_MEDIUM
from ekbatan.distributed_jobs.scheduler._tasks.dead_execution import (
    DeadExecutionHandler,
    ReviveDeadExecution,
)
from ekbatan.distributed_jobs.scheduler._tasks.failure import (
    FailureHandler,
    OnFailureReschedule,
    OnFailureRescheduleUsingTaskDataSchedule,
    OnFailureRetryLater,
)
from ekbatan.distributed_jobs.scheduler.schedules import MisfirePolicy, PlainScheduleAndData, Schedule

if TYPE_CHECKING:
    pass

from ekbatan.distributed_jobs.scheduler._tasks.kinds import (
    CustomTask,
    Handler,
    OneTimeTask,
    RecurringTask,
    RecurringTaskWithPersistentSchedule,
    T,
    Task,
    check_task_name,
    check_timeout,
)

K = TypeVar("K", bound=Task[Any])


class _Builder(Generic[T]):
    def __init__(self, name: str, data_type: Any, default_priority: int) -> None:
        self._name = check_task_name(name)
        self._data_type = data_type
        self._priority = default_priority
        self._failure: FailureHandler | None = None
        self._dead: DeadExecutionHandler = ReviveDeadExecution()
        self._timeout: timedelta | None = None

    def on_failure(self, handler: FailureHandler) -> _Builder[T]:
        self._failure = handler
        return self

    def on_failure_retry_later(self, delay: timedelta) -> _Builder[T]:
        self._failure = OnFailureRetryLater(delay)
        return self

    def on_dead_execution(self, handler: DeadExecutionHandler) -> _Builder[T]:
        self._dead = handler
        return self

    def default_priority(self, priority: int) -> _Builder[T]:
        self._priority = priority
        return self

    def timeout(self, timeout: timedelta) -> _Builder[T]:
        """End each run after ``timeout``: an ``async`` body is cancelled; a thread body cannot
        be stopped, so it is told (``ctx.is_cancelled``, ``ctx.check_cancelled()``) and its run
        is recorded as failed at the deadline (docs/scheduler.md, "Execution timeout")."""
        self._timeout = check_timeout(timeout)
        return self

    def _with_options(self, task: K) -> K:
        """``task`` with the options every kind shares."""
        task.timeout = self._timeout
        return task


class OneTimeTaskBuilder(_Builder[T]):
    def execute(self, handler: Handler) -> OneTimeTask[T]:
        task: OneTimeTask[T] = OneTimeTask(
            self._name,
            self._data_type,
            handler,
            self._failure or OnFailureRetryLater(),
            self._dead,
            self._priority,
        )
        return self._with_options(task)


class RecurringTaskBuilder(_Builder[T]):
    def __init__(self, name: str, schedule: Schedule, data_type: Any) -> None:
        super().__init__(name, data_type, PRIORITY_HIGH)
        if schedule is None:
            raise ValueError(f"recurring task {name!r} needs a schedule, got None")
        self._schedule = schedule
        self._initial_data: Any = None
        self._on_startup = True
        self._misfire: MisfirePolicy | None = None

    def initial_data(self, data: T) -> RecurringTaskBuilder[T]:
        self._initial_data = data
        return self

    def on_failure_reschedule(self) -> RecurringTaskBuilder[T]:
        self._failure = OnFailureReschedule(self._schedule)
        return self

    def misfire(self, policy: MisfirePolicy | str) -> RecurringTaskBuilder[T]:
        """What becomes of slots that pass without a run: ``MisfirePolicy.run_once()`` (the
        default), ``.skip(grace)`` or ``.run_all(limit)``, or their string forms (``"skip|PT30S"``)."""
        if isinstance(policy, str):
            policy = MisfirePolicy.parse(policy)
        elif not isinstance(policy, MisfirePolicy):
            raise TypeError(
                f"misfire policy must be a MisfirePolicy or its string form, not {type(policy).__name__}; "
                "write e.g. MisfirePolicy.skip(timedelta(minutes=5)) or 'skip|PT5M'"
            )
        self._misfire = policy
        return self

    def do_not_schedule_on_startup(self) -> RecurringTaskBuilder[T]:
        self._on_startup = False
        return self

    def _build(self, handler: Handler, stateful: bool) -> RecurringTask[T]:
        return self._with_options(
            RecurringTask(
                self._name,
                self._schedule,
                self._data_type,
                handler,
                self._failure or OnFailureReschedule(self._schedule),
                self._dead,
                self._priority,
                initial_data=self._initial_data,
                schedule_on_startup=self._on_startup,
                stateful=stateful,
                misfire=self._misfire,
            )
        )

    def execute(self, handler: Handler) -> RecurringTask[T]:
        return self._build(handler, stateful=False)

    def execute_stateful(self, handler: Handler) -> RecurringTask[T]:
        """The handler's return value becomes the data stored for the next run."""
        return self._build(handler, stateful=True)


class PersistentScheduleTaskBuilder(_Builder[T]):
    def __init__(self, name: str, data_type: Any) -> None:
        super().__init__(name, data_type, PRIORITY_HIGH)

    def _build(self, handler: Handler, stateful: bool) -> RecurringTaskWithPersistentSchedule[T]:
        return self._with_options(
            RecurringTaskWithPersistentSchedule(
                self._name,
                self._data_type,
                handler,
                self._failure or OnFailureRescheduleUsingTaskDataSchedule(),
                self._dead,
                self._priority,
                stateful=stateful,
            )
        )

    def execute(self, handler: Handler) -> RecurringTaskWithPersistentSchedule[T]:
        return self._build(handler, stateful=False)

    def execute_stateful(self, handler: Handler) -> RecurringTaskWithPersistentSchedule[T]:
        """The handler returns a new ``ScheduleAndData``; the next run follows its schedule."""
        return self._build(handler, stateful=True)


class CustomTaskBuilder(_Builder[T]):
    def __init__(self, name: str, data_type: Any) -> None:
        super().__init__(name, data_type, PRIORITY_MEDIUM)
        self._default_time: Callable[[datetime], datetime] = lambda now: now
        self._startup: tuple[str, Any, Callable[[datetime], datetime]] | None = None

    def on_failure_reschedule(self, schedule: Schedule) -> CustomTaskBuilder[T]:
        self._failure = OnFailureReschedule(schedule)
        return self

    def default_execution_time(self, rule: Callable[[datetime], datetime]) -> CustomTaskBuilder[T]:
        self._default_time = rule
        return self

    def schedule_on_startup(
        self, instance_id: str, initial_data: T | None, when: Schedule | Callable[[datetime], datetime]
    ) -> CustomTaskBuilder[T]:
        rule = when.next_execution_time if isinstance(when, Schedule) else when
        self._startup = (instance_id, initial_data, rule)
        return self

    def execute(self, handler: Handler) -> CustomTask[T]:
        return self._with_options(
            CustomTask(
                self._name,
                self._data_type,
                handler,
                self._failure or OnFailureRetryLater(),
                self._dead,
                self._priority,
                default_execution_time=self._default_time,
                startup=self._startup,
            )
        )


class Tasks:
    """Entry point for defining tasks."""

    @staticmethod
    def one_time(name: str, data_type: Any = None) -> OneTimeTaskBuilder[Any]:
        return OneTimeTaskBuilder(name, data_type, PRIORITY_MEDIUM)

    @staticmethod
    def recurring(name: str, schedule: Schedule, data_type: Any = None) -> RecurringTaskBuilder[Any]:
        return RecurringTaskBuilder(name, schedule, data_type)

    @staticmethod
    def recurring_with_persistent_schedule(
        name: str, data_type: Any = PlainScheduleAndData
    ) -> PersistentScheduleTaskBuilder[Any]:
        return PersistentScheduleTaskBuilder(name, data_type)

    @staticmethod
    def custom(name: str, data_type: Any = None) -> CustomTaskBuilder[Any]:
        return CustomTaskBuilder(name, data_type)
