"""Recurring tasks whose schedule is stored per instance in the task data, on every
dialect."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ekbatan.distributed_jobs.scheduler import (
    Daily,
    FixedDelay,
    PersistentCronSchedule,
    PlainScheduleAndData,
    SchedulerClient,
    Schedules,
    Tasks,
    WhenExists,
)
from testsupport import EventRecorder

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def at(hour: int, minute: int, day: int = 1) -> datetime:
    return datetime(2024, 1, day, hour, minute, tzinfo=UTC)


def test_each_instance_runs_on_its_own_daily_schedule(manual, clock, dialect):
    ran: list[tuple[str, datetime, object]] = []
    task = Tasks.recurring_with_persistent_schedule("dynamic").execute(
        lambda instance, ctx: ran.append((instance.id, clock.now(), instance.data.data))
    )
    scheduler = manual(task)
    scheduler.schedule(
        task.schedulable_instance("id1", PlainScheduleAndData(Schedules.daily("23:51"), {"n": 1}))
    )
    scheduler.schedule(
        task.schedulable_instance("id2", PlainScheduleAndData(Schedules.daily("23:50"), {"n": 2}))
    )
    assert scheduler.get_scheduled_execution(("dynamic", "id1")).execution_time == at(23, 51)
    assert scheduler.get_scheduled_execution(("dynamic", "id2")).execution_time == at(23, 50)
    stored = scheduler.get_scheduled_execution(("dynamic", "id1")).data
    assert stored == PlainScheduleAndData(Daily("23:51"), {"n": 1})

    clock.set(at(23, 50))
    assert scheduler.run_any_due_executions() == 1
    clock.set(at(23, 51))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [("id2", at(23, 50), {"n": 2}), ("id1", at(23, 51), {"n": 1})]
    # next run: the stored schedule's next slot after completion; data untouched
    after = {e.instance_id: e for e in scheduler.get_scheduled_executions()}
    assert {k: e.execution_time for k, e in after.items()} == {"id1": at(23, 51, 2), "id2": at(23, 50, 2)}
    assert after["id1"].data == PlainScheduleAndData(Daily("23:51"), {"n": 1})
    assert (after["id1"].last_success, after["id1"].consecutive_failures) == (at(23, 51), 0)


def test_reschedule_with_a_new_schedule_replaces_time_and_data(manual, clock, dialect):
    task = Tasks.recurring_with_persistent_schedule("dynamic").execute(lambda instance, ctx: None)
    scheduler = manual(task)
    scheduler.schedule(task.schedulable_instance("id1", PlainScheduleAndData(Schedules.daily("23:51"), "a")))
    scheduler.schedule(task.schedulable_instance("id2", PlainScheduleAndData(Schedules.daily("23:50"), "b")))

    changed = task.schedulable_instance("id1", PlainScheduleAndData(Schedules.daily("23:55"), "a2"))
    assert scheduler.schedule(changed, when_exists=WhenExists.RESCHEDULE) is True  # moved
    id1 = scheduler.get_scheduled_execution(("dynamic", "id1"))
    assert (id1.execution_time, id1.data) == (at(23, 55), PlainScheduleAndData(Daily("23:55"), "a2"))
    id2 = scheduler.get_scheduled_execution(("dynamic", "id2"))
    assert (id2.execution_time, id2.data) == (at(23, 50), PlainScheduleAndData(Daily("23:50"), "b"))

    # the same through reschedule(key, time, new data)
    hourly = PlainScheduleAndData(Schedules.cron("0 0 * * * ?"), "b2")
    scheduler.reschedule(("dynamic", "id2"), hourly.schedule.initial_execution_time(clock.now()), hourly)
    id2 = scheduler.get_scheduled_execution(("dynamic", "id2"))
    assert (id2.execution_time, id2.data) == (at(13, 0), hourly)

    clock.set(at(13, 0))
    assert scheduler.run_any_due_executions() == 1
    assert scheduler.get_scheduled_execution(("dynamic", "id2")).execution_time == at(14, 0)


def test_stateful_fixed_delay_writes_the_returned_data(manual, clock, dialect):
    def handler(instance, ctx):
        return PlainScheduleAndData(instance.data.schedule, instance.data.data + 1)

    task = Tasks.recurring_with_persistent_schedule("stateful").execute_stateful(handler)
    scheduler = manual(task)
    scheduler.schedule(task.schedulable_instance("1", PlainScheduleAndData(FixedDelay.of_seconds(10), 1)))
    first = scheduler.get_scheduled_execution(("stateful", "1"))
    assert (first.execution_time, first.data.data) == (T0, 1)  # fixed delay: initially now

    assert scheduler.run_any_due_executions() == 1
    second = scheduler.get_scheduled_execution(("stateful", "1"))
    assert (second.execution_time, second.data) == (
        T0 + timedelta(seconds=10),
        PlainScheduleAndData(FixedDelay.of_seconds(10), 2),
    )
    clock.advance(timedelta(seconds=10))
    assert scheduler.run_any_due_executions() == 1
    assert scheduler.get_scheduled_execution(("stateful", "1")).data.data == 3


def test_stateful_handler_can_switch_to_a_new_schedule(manual, clock, dialect):
    task = Tasks.recurring_with_persistent_schedule("stateful").execute_stateful(
        lambda instance, ctx: PlainScheduleAndData(Schedules.daily("18:30"), "switched")
    )
    scheduler = manual(task)
    scheduler.schedule(
        task.schedulable_instance("1", PlainScheduleAndData(FixedDelay.of_minutes(5), "first"))
    )
    assert scheduler.run_any_due_executions() == 1
    row = scheduler.get_scheduled_execution(("stateful", "1"))
    assert (row.execution_time, row.data) == (at(18, 30), PlainScheduleAndData(Daily("18:30"), "switched"))


def test_persistent_cron_schedule_data(manual, clock, dialect):
    ran: list[object] = []
    task = Tasks.recurring_with_persistent_schedule("cron-jobs", data_type=PersistentCronSchedule).execute(
        lambda instance, ctx: ran.append(instance.data.data)
    )
    scheduler = manual(task)
    data = PersistentCronSchedule("0 0 12 * * ?", "Europe/Rome", {"report": "daily"})
    scheduler.schedule(task.schedulable_instance("rome", data))
    # strictly after now (12:00 UTC = 13:00 Rome): 12:00 Rome = 11:00 UTC on the 2nd
    assert scheduler.get_scheduled_execution(("cron-jobs", "rome")).execution_time == at(11, 0, 2)
    clock.set(at(11, 0, 2))
    assert scheduler.run_any_due_executions() == 1
    assert ran == [{"report": "daily"}]
    row = scheduler.get_scheduled_execution(("cron-jobs", "rome"))
    assert (row.execution_time, row.data) == (at(11, 0, 3), data)


def test_failure_waits_for_the_next_slot_of_the_stored_schedule(manual, clock, dialect):
    recorder = EventRecorder()

    def handler(instance, ctx):
        clock.advance(timedelta(minutes=2))
        raise RuntimeError("fails")

    task = Tasks.recurring_with_persistent_schedule("dynamic").execute(handler)
    scheduler = manual(task, recorder=recorder)
    scheduler.schedule(
        task.schedulable_instance("1", PlainScheduleAndData(Schedules.daily("12:00", "18:00"))), T0
    )
    assert scheduler.run_any_due_executions() == 1
    row = scheduler.get_scheduled_execution(("dynamic", "1"))
    assert (row.execution_time, row.consecutive_failures, row.last_failure) == (
        at(18, 0),
        1,
        T0 + timedelta(minutes=2),
    )
    assert len(recorder.failures()) == 1


def test_an_instance_needs_data_with_a_schedule(engine, clock, dialect):
    task = Tasks.recurring_with_persistent_schedule("dynamic").execute(lambda instance, ctx: None)
    with pytest.raises(ValueError, match="needs data with a schedule"):
        task.instance("1")
    with pytest.raises(ValueError, match="needs data with a schedule"):
        task.schedulable_instance("1")
    client = SchedulerClient(engine, [task], clock=clock)
    client.schedule(task.instance("1", PlainScheduleAndData(Schedules.daily("08:00"))), T0)
    assert client.get_scheduled_execution(("dynamic", "1")).data.schedule == Daily("08:00")
