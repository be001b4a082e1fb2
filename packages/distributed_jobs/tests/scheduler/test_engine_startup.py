"""What ``start()`` does with the tasks given to ``start_tasks`` — inserting,
rescheduling or leaving recurring rows, and cancelling disabled ones — on every dialect. A "restart" is a new Scheduler on the same table running its start-up step.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    PlainScheduleAndData,
    Schedule,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Schedules,
    SettableClock,
    Tasks,
)
from testsupport import EventRecorder

MARCH_1 = datetime(2018, 3, 1, 8, 0, tzinfo=UTC)
SEVEN = datetime(2018, 3, 1, 7, 0, tzinfo=UTC)
EIGHT = datetime(2018, 3, 1, 8, 0, tzinfo=UTC)
KEY = ("recurring-a", "recurring")


@pytest.fixture
def restart(engine: sa.Engine, built: list[Scheduler]):
    """``restart(clock, *start_tasks)``: a new scheduler on the table that runs its start-up step."""

    def make(clock: SettableClock, *tasks, recorder: EventRecorder | None = None) -> Scheduler:
        builder = Scheduler.create(engine).clock(clock).scheduler_name("manual").start_tasks(*tasks)
        if recorder is not None:
            builder.add_listener(recorder)
        scheduler = builder.build()
        built.append(scheduler)
        scheduler.run_startup_tasks()
        return scheduler

    return make


def noop(instance, ctx) -> None:
    return None


def recurring(schedule: Schedule, name: str = "recurring-a", data: object = None):
    builder = Tasks.recurring(name, schedule)
    if data is not None:
        builder.initial_data(data)
    return builder.execute(noop)


def row(scheduler: SchedulerClient, key=KEY):
    return scheduler.get_scheduled_execution(key)


# --------------------------------------------------------------------------- RecurringTaskScheduleTest
def test_daily_task_is_first_scheduled_to_the_next_slot_today(engine, dialect, built):
    clock = SettableClock(MARCH_1)
    task = recurring(Schedules.daily("23:59"))
    builder = Scheduler.create(engine).clock(clock).start_tasks(task).scheduler_name("node-1")
    scheduler = builder.polling_interval(timedelta(minutes=1)).build()
    built.append(scheduler)
    with scheduler:  # start() schedules synchronously, before returning
        assert row(scheduler).execution_time == datetime(2018, 3, 1, 23, 59, tzinfo=UTC)


def test_fixed_delay_task_is_first_scheduled_now(restart, dialect):
    scheduler = restart(SettableClock(MARCH_1), recurring(Schedules.fixed_delay(timedelta(hours=1))))
    assert row(scheduler).execution_time == MARCH_1


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (("23:59",), ("12:00", "23:59"), datetime(2018, 3, 1, 12, 0, tzinfo=UTC)),
        (("12:00",), ("23:59",), datetime(2018, 3, 1, 23, 59, tzinfo=UTC)),
    ],
    ids=["earlier-slot-added", "moved-later"],
)
def test_restart_with_changed_daily_schedule_moves_the_row(restart, dialect, before, after, expected):
    clock = SettableClock(MARCH_1)
    first = restart(clock, recurring(Schedules.daily(*before)))
    assert row(first).execution_time != expected
    second = restart(clock, recurring(Schedules.daily(*after)))
    assert row(second).execution_time == expected


def test_restart_with_new_schedule_and_new_initial_data_keeps_the_stored_data(restart, dialect):
    clock = SettableClock(MARCH_1)
    restart(clock, recurring(Schedules.daily("23:59"), data=1))
    scheduler = restart(clock, recurring(Schedules.daily("12:00"), data=2))
    assert row(scheduler).execution_time == datetime(2018, 3, 1, 12, 0, tzinfo=UTC)
    assert row(scheduler).data == 1


# --------------------------------------------------------------------------- ScheduleRecurringOnStartupTest
S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
DAILY_8 = Schedules.daily("08:00")


RECONCILIATION_CASES = {
    # name: (existing execution_time, schedule at the restart, expected execution_time)
    "same-daily": (EIGHT, DAILY_8, EIGHT),
    "imminent-1s": (SEVEN + S, DAILY_8, SEVEN + S),  # due within 10 s: never changed
    "guard-9.999s": (SEVEN + 10 * S - MS, DAILY_8, SEVEN + 10 * S - MS),
    "guard-10s": (SEVEN + 10 * S, DAILY_8, EIGHT),  # the guard is "earlier than now + 10 s"
    "now-plus-11s": (SEVEN + 11 * S, DAILY_8, EIGHT),
    "plus-20ms": (EIGHT + 20 * MS, DAILY_8, EIGHT + 20 * MS),  # within the 1 s tolerance
    "minus-20ms": (EIGHT - 20 * MS, DAILY_8, EIGHT - 20 * MS),
    "plus-1s": (EIGHT + S, DAILY_8, EIGHT + S),  # exactly 1 s is not "more than 1 s"
    "minus-1s": (EIGHT - S, DAILY_8, EIGHT - S),
    "plus-1.001s": (EIGHT + S + MS, DAILY_8, EIGHT),
    "plus-20s": (EIGHT + 20 * S, DAILY_8, EIGHT),  # symmetric: later and earlier both move
    "minus-20s": (EIGHT - 20 * S, DAILY_8, EIGHT),
    "cron-earlier": (EIGHT, Schedules.cron("0 30 7 * * ?"), datetime(2018, 3, 1, 7, 30, tzinfo=UTC)),
    "cron-later": (EIGHT, Schedules.cron("0 0 9 * * ?"), datetime(2018, 3, 1, 9, 0, tzinfo=UTC)),
    # fixed delay is not deterministic: the row only ever moves earlier, to now + delay
    "fixed-delay-1-day": (EIGHT, Schedules.fixed_delay(timedelta(days=1)), EIGHT),
    "fixed-delay-1-hour": (EIGHT, Schedules.fixed_delay(timedelta(hours=1)), EIGHT),
    "fixed-delay-1-min": (EIGHT, Schedules.fixed_delay(timedelta(minutes=1)), SEVEN + timedelta(minutes=1)),
    "fixed-delay-imminent": (SEVEN + 5 * S, Schedules.fixed_delay(timedelta(minutes=1)), SEVEN + 5 * S),
}


def test_startup_reconciles_existing_rows(restart, engine, dialect):
    """Now 07:00; each case is its own recurring task, all restarted together."""
    clock = SettableClock(SEVEN)
    tasks = {
        name: recurring(schedule, name, data={"kept": True})
        for name, (_, schedule, _) in RECONCILIATION_CASES.items()
    }
    client = SchedulerClient(engine, list(tasks.values()), clock=clock)
    for name, (existing, _, _) in RECONCILIATION_CASES.items():
        client.schedule(tasks[name].instance("recurring", {"stored": name}), existing)
    before = {name: row(client, (name, "recurring")) for name in tasks}

    recorder = EventRecorder()
    scheduler = restart(clock, *tasks.values(), recorder=recorder)
    after = {name: row(scheduler, (name, "recurring")) for name in tasks}
    assert {name: r.execution_time for name, r in after.items()} == {
        name: expected for name, (_, _, expected) in RECONCILIATION_CASES.items()
    }
    assert {name: r.data for name, r in after.items()} == {name: {"stored": name} for name in tasks}
    # an unchanged row is not written at all; a moved one is written once
    assert {name: r.execution.version - before[name].execution.version for name, r in after.items()} == {
        name: 0 if existing == expected else 1
        for name, (existing, _, expected) in RECONCILIATION_CASES.items()
    }
    assert recorder.scheduled == []  # start-up scheduling fires no on_execution_scheduled
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0


def test_startup_reschedule_resets_failure_bookkeeping(restart, engine, dialect):
    clock = SettableClock(SEVEN)
    failing = Tasks.recurring("recurring-a", Schedules.daily("09:00")).execute(lambda instance, ctx: 1 / 0)
    first = restart(clock, failing)
    clock.set(datetime(2018, 3, 1, 9, 0, tzinfo=UTC))
    assert first.run_any_due_executions() == 1
    failed = row(first)
    assert (failed.consecutive_failures, failed.execution_time) == (1, datetime(2018, 3, 2, 9, 0, tzinfo=UTC))

    second = restart(clock, recurring(Schedules.daily("10:00")))
    moved = row(second)
    assert moved.execution_time == datetime(2018, 3, 1, 10, 0, tzinfo=UTC)
    assert (moved.consecutive_failures, moved.last_failure, moved.last_success) == (0, None, None)


def test_new_row_is_inserted_without_on_execution_scheduled(restart, dialect):
    recorder = EventRecorder()
    scheduler = restart(SettableClock(SEVEN), recurring(Schedules.daily("08:00")), recorder=recorder)
    assert row(scheduler).execution_time == EIGHT
    assert recorder.scheduled == []


def test_picked_row_with_changed_schedule_is_an_error_reported_and_others_still_start(
    restart, engine, dialect
):
    clock = SettableClock(SEVEN)
    task = recurring(Schedules.daily("08:00"))
    client = SchedulerClient(engine, [task], clock=clock)
    client.schedule(task.instance("recurring"), EIGHT)
    assert client.repository.pick(row(client).execution, clock.now()) is not None

    other = recurring(Schedules.daily("09:00"), name="recurring-b")
    recorder = EventRecorder()
    scheduler = restart(clock, recurring(Schedules.daily("12:00")), other, recorder=recorder)
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 1
    assert (row(scheduler).execution_time, row(scheduler).is_picked) == (EIGHT, True)
    # retried before each poll, but not a database outage to wait for
    assert scheduler.startup_tasks_pending == ["recurring-a"]
    assert scheduler.startup_tasks_waiting_for_database == []
    assert row(scheduler, ("recurring-b", "recurring")).execution_time == datetime(2018, 3, 1, 9, tzinfo=UTC)


def test_a_start_up_task_whose_data_cannot_be_stored_is_pending_but_not_waiting_for_the_database(
    restart, dialect, caplog
):
    clock = SettableClock(SEVEN)
    broken = recurring(Schedules.daily("08:00"), data=object())  # JSON cannot encode it
    caplog.set_level(logging.WARNING, logger="ekbatan")
    scheduler = restart(clock, broken, recurring(Schedules.daily("09:00"), name="recurring-b"))
    scheduler.run_startup_tasks()  # as the poller does before each poll
    assert scheduler.startup_tasks_pending == ["recurring-a"]
    assert scheduler.startup_tasks_waiting_for_database == []
    # said once, naming the task, with its traceback: a bug, not an outage
    lines = [r for r in caplog.records if r.name.startswith("ekbatan")]
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in lines] == [
        (logging.ERROR, "start-up task recurring-a cannot be scheduled")
    ]
    assert lines[0].exc_info is not None
    assert row(scheduler) is None
    assert row(scheduler, ("recurring-b", "recurring")).execution_time == datetime(2018, 3, 1, 9, tzinfo=UTC)


def test_two_instances_starting_together_create_one_row(restart, dialect):
    clock = SettableClock(SEVEN)
    recorder = EventRecorder()
    restart(clock, recurring(Schedules.daily("08:00")), recorder=recorder)
    scheduler = restart(clock, recurring(Schedules.daily("08:00")), recorder=recorder)
    assert [e.key for e in scheduler.get_scheduled_executions()] == [
        scheduler.get_scheduled_execution(KEY).key
    ]
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0


def test_do_not_schedule_on_startup_inserts_nothing(restart, dialect):
    task = Tasks.recurring("recurring-a", Schedules.daily("08:00")).do_not_schedule_on_startup().execute(noop)
    scheduler = restart(SettableClock(SEVEN), task)
    assert row(scheduler) is None


# --------------------------------------------------------------------------- DisabledCronTaskTest
def test_disabled_cron_removes_the_row_and_never_schedules_it_again(restart, dialect):
    clock = SettableClock(SEVEN)
    first = restart(clock, recurring(Schedules.cron("0 0 12 * * ?")))
    assert row(first).execution_time == datetime(2018, 3, 1, 12, 0, tzinfo=UTC)

    second = restart(clock, recurring(Schedules.cron("-")))
    assert row(second) is None
    third = restart(clock, recurring(Schedules.cron("-")))
    assert row(third) is None
    assert third.get_scheduled_executions() == []


@pytest.mark.parametrize("disabled", [Schedules.disabled(), Schedules.parse("-")], ids=["disabled", "parsed"])
def test_other_disabled_schedules_cancel_too(restart, dialect, disabled):
    clock = SettableClock(SEVEN)
    restart(clock, recurring(Schedules.daily("08:00")))
    assert row(restart(clock, recurring(disabled))) is None


def test_disabled_schedule_leaves_a_currently_executing_row_alone(restart, engine, dialect):
    clock = SettableClock(SEVEN)
    first = restart(clock, recurring(Schedules.cron("0 0 12 * * ?")))
    assert first.repository.pick(row(first).execution, clock.now()) is not None
    recorder = EventRecorder()
    second = restart(clock, recurring(Schedules.cron("-")), recorder=recorder)
    assert row(second).is_picked
    assert recorder.count(SchedulerEventType.UNEXPECTED_ERROR) == 0


# --------------------------------------------------------------------------- custom tasks
def test_custom_task_schedule_on_startup_with_a_schedule(restart, dialect):
    clock = SettableClock(SEVEN)
    task = (
        Tasks.custom("custom")
        .schedule_on_startup("only", {"n": 1}, Schedules.fixed_delay(timedelta(hours=1)))
        .execute(noop)
    )
    scheduler = restart(clock, task)
    found = row(scheduler, ("custom", "only"))
    assert (found.execution_time, found.data) == (SEVEN + timedelta(hours=1), {"n": 1})


def test_custom_task_schedule_on_startup_is_never_reconciled(restart, dialect):
    clock = SettableClock(SEVEN)
    original = Tasks.custom("custom").schedule_on_startup("only", 1, lambda now: now + timedelta(minutes=5))
    first = row(restart(clock, original.execute(noop)), ("custom", "only"))
    assert (first.execution_time, first.data) == (SEVEN + timedelta(minutes=5), 1)

    clock.set(SEVEN + timedelta(minutes=1))
    changed = Tasks.custom("custom").schedule_on_startup("only", 2, lambda now: now + timedelta(hours=3))
    again = row(restart(clock, changed.execute(noop)), ("custom", "only"))
    assert (again.execution_time, again.data, again.execution.version) == (
        SEVEN + timedelta(minutes=5),
        1,
        first.execution.version,
    )


def test_tasks_without_startup_scheduling_insert_nothing(restart, dialect):
    custom = Tasks.custom("custom").execute(noop)
    one_time = Tasks.one_time("one-time").execute(noop)
    persistent = Tasks.recurring_with_persistent_schedule("persistent").execute(noop)
    scheduler = restart(SettableClock(SEVEN), custom, one_time, persistent)
    assert scheduler.get_scheduled_executions() == []


def test_persistent_instance_is_not_touched_by_startup(restart, engine, dialect):
    clock = SettableClock(SEVEN)
    task = Tasks.recurring_with_persistent_schedule("persistent").execute(noop)
    client = SchedulerClient(engine, [task], clock=clock)
    client.schedule(task.schedulable_instance("p1", PlainScheduleAndData(Schedules.daily("09:00"), 1)))
    before = row(client, ("persistent", "p1"))
    after = row(restart(clock, task), ("persistent", "p1"))
    assert (after.execution_time, after.execution.version) == (
        datetime(2018, 3, 1, 9, tzinfo=UTC),
        before.execution.version,
    )
