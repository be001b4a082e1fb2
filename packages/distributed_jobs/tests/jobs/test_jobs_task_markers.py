"""``@one_time_task`` / ``@recurring_task_with_persistent_schedule``: what the markers make of a
function and of a class, the options they pass to the engine, and the registry's refusal of
clashing names. No database: building a registry connects to nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    JobRegistry,
    Schedule,
    Schedules,
    TaskHandler,
    one_time_task,
    recurring_task_with_persistent_schedule,
    task_definition_of,
)
from ekbatan.distributed_jobs.scheduler import (
    PRIORITY_HIGH,
    PRIORITY_MEDIUM,
    CancelDeadExecution,
    ExecutionContext,
    ExponentialBackoff,
    MaxRetries,
    OneTimeTask,
    OnFailureRescheduleUsingTaskDataSchedule,
    OnFailureRetryLater,
    PlainScheduleAndData,
    RecurringTaskWithPersistentSchedule,
    ReviveDeadExecution,
    TaskInstance,
    Tasks,
)


@dataclass
class Receipt:
    order: str
    amount_cents: int


@one_time_task("send-receipt", data_type=Receipt)
def send_receipt(instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None:
    pass


@one_time_task(
    "charge",
    data_type=dict,
    priority=70,
    on_failure=ExponentialBackoff(timedelta(seconds=10)),
    max_retries=3,
    on_dead_execution=CancelDeadExecution(),
)
async def charge(instance: TaskInstance[dict[str, int]], ctx: ExecutionContext) -> None:
    pass


@recurring_task_with_persistent_schedule("report")
def report(instance: TaskInstance[PlainScheduleAndData], ctx: ExecutionContext) -> None:
    pass


@one_time_task("send-invoice")
class SendInvoice(TaskHandler[Receipt]):
    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    def execute(self, instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None:
        pass


def test_a_function_becomes_the_engine_task_with_its_name_data_type_and_defaults():
    assert isinstance(send_receipt, OneTimeTask)
    assert send_receipt.name == "send-receipt" and send_receipt.data_type is Receipt
    assert send_receipt.default_priority == PRIORITY_MEDIUM
    assert isinstance(send_receipt.failure_handler, OnFailureRetryLater)
    assert isinstance(send_receipt.dead_execution_handler, ReviveDeadExecution)
    instance = send_receipt.instance("1045", Receipt("1045", 1250))
    assert (instance.task_name, instance.id, instance.data) == ("send-receipt", "1045", Receipt("1045", 1250))
    definition = task_definition_of(send_receipt)
    assert definition is not None and definition.module == __name__
    assert definition.defined_as == f"{__name__}.send_receipt"


def test_the_options_reach_the_engine_task():
    assert charge.default_priority == 70
    assert isinstance(charge.dead_execution_handler, CancelDeadExecution)
    failure = charge.failure_handler
    assert isinstance(failure, MaxRetries) and failure.max_retries == 3
    assert isinstance(failure.delegate, ExponentialBackoff)
    assert charge.instance("x", {"a": 1}).priority == 70


def test_max_retries_alone_retries_as_the_kind_does_by_default():
    @one_time_task("t1", max_retries=1)
    def one(instance: TaskInstance[object], ctx: ExecutionContext) -> None: ...

    @recurring_task_with_persistent_schedule("t2", max_retries=1)
    def two(instance: TaskInstance[PlainScheduleAndData], ctx: ExecutionContext) -> None: ...

    assert isinstance(one.failure_handler, MaxRetries)
    assert isinstance(one.failure_handler.delegate, OnFailureRetryLater)
    assert isinstance(two.failure_handler, MaxRetries)
    assert isinstance(two.failure_handler.delegate, OnFailureRescheduleUsingTaskDataSchedule)


def test_a_persistent_schedule_task_defaults_to_plain_schedule_and_data():
    assert isinstance(report, RecurringTaskWithPersistentSchedule)
    assert report.data_type is PlainScheduleAndData and report.default_priority == PRIORITY_HIGH
    with pytest.raises(ValueError, match="needs data with a schedule"):
        report.instance("acme")
    data = PlainScheduleAndData(Schedules.fixed_delay(timedelta(minutes=5)), {"to": "ops"})
    assert report.schedulable_instance("acme", data).instance.data is data


def test_a_class_stays_a_class_with_a_typed_handle_and_its_data_type_from_the_base():
    assert isinstance(SendInvoice, type) and SendInvoice("hi").greeting == "hi"
    definition = task_definition_of(SendInvoice)
    assert definition is not None
    assert (definition.name, definition.data_type, definition.kind) == ("send-invoice", Receipt, "one-time")
    instance = SendInvoice.instance("inv-1", Receipt("inv-1", 5), priority=7)
    assert (instance.task_name, instance.id, instance.priority) == ("send-invoice", "inv-1", 7)
    # the wrapped task build_runtime makes: the instance's execute as the handler
    built = definition.build(SendInvoice("hi").execute)
    assert isinstance(built, OneTimeTask) and built.data_type is Receipt and built is not definition.prototype


def test_the_prototype_behind_a_class_handle_refuses_to_run():
    with pytest.raises(RuntimeError, match="class task"):
        task_definition_of(SendInvoice).prototype.handler(None, None)  # type: ignore[union-attr,arg-type]


def test_a_subclass_of_a_decorated_class_is_not_a_task_until_decorated():
    class Sub(SendInvoice):
        pass

    assert task_definition_of(Sub) is None
    with pytest.raises(TypeError, match="is not a task"):
        Sub.instance("x")


def test_a_class_without_the_base_gets_the_handle_too():
    @one_time_task("plain", data_type=int)
    class Plain:
        def execute(self, instance: TaskInstance[int], ctx: ExecutionContext) -> None: ...

    made = Plain.instance("p", 3)  # type: ignore[attr-defined]
    assert (made.task_name, made.data) == ("plain", 3)


def test_a_data_type_given_twice_and_different_is_refused():
    with pytest.raises(TypeError, match="give the data type once"):

        @one_time_task("twice", data_type=dict)
        class Twice(TaskHandler[Receipt]):
            def execute(self, instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None: ...


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: one_time_task(""), "non-blank"),
        (lambda: one_time_task("x", priority="high"), "priority is an int"),  # type: ignore[call-overload]
        (lambda: one_time_task("x", max_retries=-1), "max_retries"),
        (lambda: one_time_task("x", on_failure=timedelta(1)), "on_failure takes"),  # type: ignore[call-overload]
        (lambda: one_time_task("x", retries=3), "unknown task option"),  # type: ignore[call-overload]
    ],
)
def test_bad_options_fail_at_decoration(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()


def test_wrong_shapes_are_refused_naming_what_the_engine_calls():
    with pytest.raises(TypeError, match=r"cannot take \(instance, ctx\)"):

        @one_time_task("x")
        def no_ctx(instance: TaskInstance[object]) -> None: ...

    with pytest.raises(TypeError, match="defines execute"):

        @one_time_task("y")
        class NoExecute(TaskHandler[int]):
            pass


class Hourly(DistributedJob):
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None: ...


def _builder():
    return JobRegistry.builder().connection_provider(sa.create_engine("sqlite://"))


def test_a_registry_of_tasks_only_builds_and_its_scheduler_knows_them():
    registry = _builder().with_tasks([send_receipt, report]).build()
    assert registry.job_names == () and registry.task_names == ("send-receipt", "report")
    assert registry.scheduler.repository.resolver.resolve("send-receipt") is send_receipt
    # four task threads by default, beside one per job (none here)
    assert registry.scheduler.options.threads == 4


def test_tasks_get_threads_of_their_own_beside_the_jobs():
    registry = (
        _builder().with_jobs([Hourly("a"), Hourly("b")]).with_tasks([send_receipt]).task_threads(3).build()
    )
    assert registry.scheduler.options.threads == 5


def test_no_job_and_no_task_is_still_refused():
    with pytest.raises(ValueError, match="at least one DistributedJob must be registered"):
        _builder().build()


def test_a_task_named_as_a_job_is_refused_naming_both():
    with pytest.raises(ValueError) as raised:
        _builder().with_jobs([Hourly("send-receipt")]).with_tasks([send_receipt]).build()
    message = str(raised.value)
    assert f"job {__name__}.Hourly" in message
    assert f"task 'send-receipt' ({__name__}.send_receipt)" in message


def test_two_tasks_of_one_name_are_refused_naming_both():
    @one_time_task("send-receipt")
    def other(instance: TaskInstance[object], ctx: ExecutionContext) -> None: ...

    by_hand = Tasks.one_time("report").execute(lambda instance, ctx: None)
    with pytest.raises(ValueError) as raised:
        _builder().with_tasks([send_receipt, other, report, by_hand]).build()
    message = str(raised.value)
    assert f"({__name__}.send_receipt)" in message
    assert f"({__name__}.test_two_tasks_of_one_name_are_refused_naming_both.<locals>.other)" in message
    assert f"({__name__}.report)" in message and "OneTimeTask('report')" in message


def test_the_same_task_given_twice_is_one_task():
    registry = _builder().with_tasks([send_receipt, send_receipt]).build()
    assert registry.task_names == ("send-receipt",)


def test_with_tasks_refuses_what_is_not_an_engine_task():
    with pytest.raises(TypeError, match="with_tasks takes engine tasks"):
        _builder().with_tasks([SendInvoice])  # type: ignore[list-item]
