"""Dead letters and pauses on every dialect: an execution whose retries ran out is kept as
dead (with its error) and sent back by ``retry``; a paused task name is passed over by every
polling path until resumed; a paused execution waits out of the table with its due time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    HoldError,
    HoldState,
    Scheduler,
    SchedulerClient,
    Schedules,
    SettableClock,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
    Tasks,
    create_table,
    held_table_name,
    pauses_table_name,
)
from testsupport import wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


class Boom(RuntimeError):
    pass


def fail(instance, ctx) -> None:
    raise Boom(f"cannot handle {instance.data}")


ran: list[tuple[str, str]] = []


def record(instance, ctx) -> None:
    ran.append((instance.task_name, instance.id))


FLAKY = (
    Tasks.one_time("flaky")
    .on_failure(FailureHandlers.max_retries(1).retry_every(timedelta(0)).then_dead_letter())
    .execute(fail)
)
TASK_A = Tasks.one_time("task-a").execute(record)
TASK_B = Tasks.one_time("task-b").execute(record)


@pytest.fixture(autouse=True)
def _fresh_runs():
    ran.clear()


@pytest.fixture
def client(engine: sa.Engine, clock: SettableClock) -> SchedulerClient:
    return SchedulerClient(engine, [FLAKY, TASK_A, TASK_B], clock=clock)


def scheduled_keys(client: SchedulerClient) -> set[tuple[str, str]]:
    from ekbatan.distributed_jobs.scheduler import ScheduledExecutionsFilter

    return {
        (e.task_name, e.instance_id) for e in client.get_scheduled_executions(ScheduledExecutionsFilter.all())
    }


# --------------------------------------------------------------------------- dead letters
def test_an_execution_out_of_retries_is_kept_dead_with_its_error_and_retry_sends_it_back(
    manual, client, clock
):
    scheduler = manual(FLAKY)
    client.schedule(FLAKY.instance("order-7", {"n": 7}), T0)
    assert scheduler.run_any_due_executions() == 1  # the first attempt, retried at once
    assert scheduler.run_any_due_executions() == 1  # the retry: out of retries
    assert scheduled_keys(client) == set()
    [dead] = client.get_held_executions(state="dead")
    assert (dead.task_name, dead.instance_id, dead.state) == ("flaky", "order-7", HoldState.DEAD)
    assert dead.consecutive_failures == 2
    assert dead.last_failure == clock.now()
    assert dead.error.error_class.endswith("Boom")
    assert dead.error.message == "cannot handle {'n': 7}"
    assert "raise Boom" in dead.error.traceback
    assert dead.held_by == "manual"
    assert dead.reason == "failed 2 time(s) in a row"
    assert client.count_held() == {("flaky", HoldState.DEAD): 1}

    # nothing picks it: it is out of scheduled_tasks
    clock.advance(timedelta(hours=1))
    assert scheduler.run_any_due_executions() == 0

    released = client.retry_dead("flaky", "order-7")
    assert released.executions == ("order-7",)
    back = client.get_scheduled_execution(("flaky", "order-7"))
    assert back.execution_time == clock.now()
    assert back.consecutive_failures == 0  # its retries start over
    assert back.data == {"n": 7}
    assert client.get_held_executions() == []
    # ...and fails its way back into the dead letters, the data kept all along
    scheduler.run_any_due_executions()
    scheduler.run_any_due_executions()
    assert client.get_held_execution("flaky", "order-7").state is HoldState.DEAD


def test_retry_of_a_whole_task_and_cancel_of_a_dead_one(manual, client, clock):
    scheduler = manual(FLAKY)
    for n in range(3):
        client.schedule(FLAKY.instance(f"i{n}", n), T0)
    scheduler.run_any_due_executions()
    scheduler.run_any_due_executions()
    assert [h.instance_id for h in client.get_held_executions(task_name="flaky")] == ["i0", "i1", "i2"]

    client.cancel(("flaky", "i1"))  # a dead one is dropped for good
    assert client.get_held_execution("flaky", "i1") is None
    # i2 was scheduled again meanwhile: it stays dead rather than overwrite the new one
    client.schedule(FLAKY.instance("i2", "new"), T0 + timedelta(days=1))
    released = client.retry_dead("flaky", when=T0 + timedelta(minutes=5))
    assert released.executions == ("i0",)
    assert released.left_held == ("i2",)
    assert client.get_scheduled_execution(("flaky", "i0")).execution_time == T0 + timedelta(minutes=5)
    assert client.get_scheduled_execution(("flaky", "i2")).data == "new"
    assert client.get_held_execution("flaky", "i2").state is HoldState.DEAD


def test_retry_and_resume_say_when_there_is_nothing_to_send_back(client):
    with pytest.raises(HoldError, match="no dead execution flaky/nope"):
        client.retry_dead("flaky", "nope")
    with pytest.raises(HoldError, match="task-a is not paused"):
        client.resume_task("task-a")


def test_then_remove_still_deletes(manual, client):
    removing = (
        Tasks.one_time("flaky")
        .on_failure(FailureHandlers.max_retries(0).retry_every(timedelta(0)).then_remove())
        .execute(fail)
    )
    scheduler = manual(removing)
    client.schedule(removing.instance("x"), T0)
    scheduler.run_any_due_executions()
    assert scheduled_keys(client) == set()
    assert client.get_held_executions() == []


# --------------------------------------------------------------------------- task pauses
def test_a_paused_task_is_passed_over_until_resumed(manual, client, engine):
    scheduler = manual(TASK_A, TASK_B)
    client.schedule(TASK_A.instance("a1"), T0)
    client.schedule(TASK_B.instance("b1"), T0)
    assert client.pause_task("task-a", reason="vendor outage", by="ops@example") is True
    assert client.pause_task("task-a", reason="again") is False  # the first pause's record stays
    [pause] = client.paused_tasks()
    assert (pause.task_name, pause.paused_by, pause.reason) == ("task-a", "ops@example", "vendor outage")

    assert scheduler.run_any_due_executions() == 1
    assert ran == [("task-b", "b1")]
    # scheduled while paused: waits too
    client.schedule(TASK_A.instance("a2"), T0)
    assert scheduler.run_any_due_executions() == 0
    assert scheduled_keys(client) == {("task-a", "a1"), ("task-a", "a2")}

    released = client.resume_task("task-a")
    assert released.task_pause_lifted
    assert client.paused_tasks() == []
    assert scheduler.run_any_due_executions() == 2
    assert sorted(ran[1:]) == [("task-a", "a1"), ("task-a", "a2")]


def test_a_pause_outlives_the_scheduler_that_saw_it(manual, client, engine, clock):
    client.pause_task("task-a")
    client.schedule(TASK_A.instance("a1"), T0)
    first = manual(TASK_A)
    assert first.run_any_due_executions() == 0
    first.stop()
    restarted = manual(TASK_A)
    assert restarted.run_any_due_executions() == 0
    client.resume_task("task-a")
    assert restarted.run_any_due_executions() == 1


# --------------------------------------------------------------------------- execution pauses
def test_a_paused_execution_waits_out_of_the_table_with_its_due_time(manual, client, clock):
    scheduler = manual(TASK_A)
    client.schedule(TASK_A.instance("a1", {"k": 1}), T0 + timedelta(minutes=3))
    client.schedule(TASK_A.instance("a2"), T0)
    assert client.pause_execution(("task-a", "a1"), reason="check the input first") is True
    assert client.pause_execution(("task-a", "a1")) is False  # already paused
    assert scheduled_keys(client) == {("task-a", "a2")}
    [held] = client.get_held_executions(state=HoldState.PAUSED)
    assert (held.instance_id, held.execution_time, held.reason) == (
        "a1",
        T0 + timedelta(minutes=3),
        "check the input first",
    )
    assert held.held_by  # user@host when the caller does not say

    clock.advance(timedelta(hours=1))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [("task-a", "a2")]

    released = client.resume_execution(("task-a", "a1"))
    assert released.executions == ("a1",) and not released.task_pause_lifted
    back = client.get_scheduled_execution(("task-a", "a1"))
    assert back.execution_time == T0 + timedelta(minutes=3)  # overdue now: runs at once
    assert back.data == {"k": 1}
    assert scheduler.run_any_due_executions() == 1
    assert ran[-1] == ("task-a", "a1")


def test_pausing_an_execution_refuses_a_running_or_missing_one(client, clock):
    client.schedule(TASK_A.instance("a1"), T0)
    execution = client.get_scheduled_execution(("task-a", "a1")).execution
    client.repository.pick(execution, clock.now())
    with pytest.raises(TaskInstanceCurrentlyExecutingError):
        client.pause_execution(("task-a", "a1"))
    with pytest.raises(TaskInstanceNotFoundError):
        client.pause_execution(("task-a", "missing"))


def test_resuming_a_task_also_resumes_its_executions_paused_one_by_one(client):
    client.schedule(TASK_A.instance("a1"), T0)
    client.schedule(TASK_A.instance("a2"), T0)
    client.pause_execution(("task-a", "a1"))
    client.pause_task("task-a")
    released = client.resume_task("task-a")
    assert released.task_pause_lifted and released.executions == ("a1",)
    assert scheduled_keys(client) == {("task-a", "a1"), ("task-a", "a2")}


def test_a_recurring_job_paused_on_its_own_is_not_scheduled_anew_at_start_up(manual, client, clock):
    job = Tasks.recurring("hourly", Schedules.fixed_delay(timedelta(hours=1))).execute(record)
    job.on_startup(client, clock.now())
    clock.advance(timedelta(hours=2))
    assert client.pause_execution(("hourly", "recurring"), reason="vendor outage") is True

    job.on_startup(client, clock.now())  # a node starting while it is paused
    assert scheduled_keys(client) == set()
    assert manual(job).run_any_due_executions() == 0

    back = client.resume_execution(("hourly", "recurring"))
    assert back.executions == ("recurring",) and back.left_held == ()
    assert client.get_scheduled_execution(("hourly", "recurring")).execution_time == T0  # as paused


# --------------------------------------------------------------------------- running schedulers
def test_a_fetching_scheduler_sees_a_pause_and_a_resumption_from_another_client(engine, built):
    pause_then_resume(engine, built, lock_and_fetch=False)


@pytest.mark.dialects("postgresql", "mariadb")
def test_a_lock_and_fetch_scheduler_sees_a_pause_and_a_resumption_from_another_client(engine, built):
    pause_then_resume(engine, built, lock_and_fetch=True)


def pause_then_resume(engine: sa.Engine, built: list[Scheduler], *, lock_and_fetch: bool) -> None:
    done = threading.Event()
    seen: list[str] = []

    def handler(instance, ctx) -> None:
        seen.append(instance.id)
        done.set()

    task = Tasks.one_time("task-a").execute(handler)
    builder = (
        Scheduler.create(engine, task).polling_interval(timedelta(milliseconds=300)).failure_logging("OFF")
    )
    if lock_and_fetch:
        builder.poll_using_lock_and_fetch()
    scheduler = builder.build()
    built.append(scheduler)
    client = SchedulerClient(engine, [task])
    client.pause_task("task-a")
    scheduler.start()
    client.schedule(task.instance("a1"), datetime.now(UTC))
    # polls after the row was due pass it over
    due = datetime.now(UTC)
    wait_until(
        lambda: (scheduler.last_successful_poll or due) > due + timedelta(milliseconds=700), timeout=10
    )
    assert seen == []
    client.resume_task("task-a")
    assert done.wait(10), "the resumed task did not run within its polling interval and more"
    assert seen == ["a1"]


def test_a_missing_pauses_table_means_nothing_is_paused(database, clock, built):
    engine = database.engine()
    create_table(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {pauses_table_name('scheduled_tasks')}")
        conn.exec_driver_sql(f"DROP TABLE {held_table_name('scheduled_tasks')}")
    scheduler = Scheduler.create(engine, TASK_A).clock(clock).failure_logging("OFF").build()
    built.append(scheduler)
    client = SchedulerClient(engine, [TASK_A], clock=clock)
    # nothing can be held without the held table: a recurring job is scheduled at start-up
    job = Tasks.recurring("hourly", Schedules.fixed_delay(timedelta(hours=1))).execute(record)
    job.on_startup(client, clock.now())
    assert client.get_scheduled_execution(("hourly", "recurring")) is not None
    client.schedule(TASK_A.instance("a1"), T0)
    assert scheduler.run_any_due_executions() == 1
    client.schedule(TASK_A.instance("a2"), T0)
    with pytest.raises(Exception, match="scheduled_tasks_pauses"):
        client.pause_task("task-a")
    assert scheduled_keys(client) == {
        ("task-a", "a2"),
        ("hourly", "recurring"),
    }  # the failed pause lost nothing
