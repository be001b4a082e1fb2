"""``ExecutionInterceptor``: wraps every execution, the first registered outermost; it sees the
instance and context, may replace the completion, may decline to run the handler, and an
exception it raises is the execution's failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ekbatan.distributed_jobs.scheduler import (
    ExecutionInterceptor,
    OnCompleteRescheduleTo,
    SchedulerEventType,
    Tasks,
)
from ekbatan.distributed_jobs.scheduler._observability import ExecutionChain
from testsupport import EventRecorder

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)  # the ``clock`` fixture's start


class Recording(ExecutionInterceptor):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def execute(self, instance, ctx, chain):
        self.log.append(f"{self.name} before {instance.id}")
        completion = chain.proceed(instance, ctx)
        self.log.append(f"{self.name} after")
        return completion


def test_the_first_registered_is_outermost(manual, dialect):
    log: list[str] = []
    task = Tasks.one_time("wrapped").execute(lambda instance, ctx: log.append("handler"))
    scheduler = manual(task, interceptors=[Recording("outer", log), Recording("inner", log)])
    scheduler.schedule(task.instance("1"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert log == ["outer before 1", "inner before 1", "handler", "inner after", "outer after"]
    assert scheduler.get_scheduled_execution(("wrapped", "1")) is None  # completed as usual


def test_an_interceptor_sees_the_execution_and_may_replace_the_completion(manual, dialect):
    seen = []
    later = T0 + timedelta(days=1)

    class Postpone(ExecutionInterceptor):
        def execute(self, instance, ctx, chain):
            seen.append((instance.task_name, instance.id, instance.data, ctx.execution.version))
            chain.proceed(instance, ctx)
            return OnCompleteRescheduleTo(later)

    task = Tasks.one_time("postponed", dict).execute(lambda instance, ctx: None)
    scheduler = manual(task, interceptors=[Postpone()])
    scheduler.schedule(task.instance("1", {"n": 1}), T0)
    assert scheduler.run_any_due_executions() == 1
    assert seen == [("postponed", "1", {"n": 1}, 2)]  # the picked row's version
    row = scheduler.get_scheduled_execution(("postponed", "1"))
    assert row is not None and row.execution_time == later  # kept, not removed


def test_an_interceptor_that_does_not_proceed_skips_the_handler(manual, dialect):
    ran: list[str] = []

    class Skip(ExecutionInterceptor):
        def execute(self, instance, ctx, chain):
            return OnCompleteRescheduleTo(T0 + timedelta(hours=1))

    task = Tasks.one_time("skipped").execute(lambda instance, ctx: ran.append("handler"))
    scheduler = manual(task, interceptors=[Skip()])
    scheduler.schedule(task.instance("1"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert ran == []


def test_an_exception_in_an_interceptor_is_the_executions_failure(manual, dialect):
    ran: list[str] = []
    recorder = EventRecorder()

    class Refuse(ExecutionInterceptor):
        def execute(self, instance, ctx, chain):
            raise PermissionError(f"tenant of {instance.id} is suspended")

    task = Tasks.one_time("refused").execute(lambda instance, ctx: ran.append("handler"))
    scheduler = manual(task, interceptors=[Refuse()], recorder=recorder)
    scheduler.schedule(task.instance("1"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert ran == []
    [failure] = recorder.failures()
    assert isinstance(failure.cause, PermissionError) and "tenant of 1" in str(failure.cause)
    row = scheduler.get_scheduled_execution(("refused", "1"))
    assert row is not None and row.consecutive_failures == 1  # the task's failure handler applied
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0  # a failure, not an engine error


def test_the_default_interceptor_only_proceeds():
    calls = []

    def terminal(instance, ctx):
        calls.append((instance, ctx))
        return "completion"

    chain = ExecutionChain([ExecutionInterceptor(), ExecutionInterceptor()], terminal)
    assert chain.proceed("instance", "ctx") == "completion"
    assert calls == [("instance", "ctx")]
