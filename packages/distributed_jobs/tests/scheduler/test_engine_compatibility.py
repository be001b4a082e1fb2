"""Compatibility with db-scheduler's table, per dialect: end-to-end runs, time encodings that read the same
as db-scheduler's rows, far-future instants, scrolling, and tables from the older DDL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    NEVER,
    ExecutionTimeAndId,
    OnCompleteReschedule,
    ScheduledExecutionsFilter,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Schedules,
    SettableClock,
    Tasks,
    create_table,
)
from testsupport import EventRecorder, wait_until

FAILURE_EVENTS = (
    SchedulerEventType.UNEXPECTED_ERROR,
    SchedulerEventType.COMPLETIONHANDLER_ERROR,
    SchedulerEventType.FAILUREHANDLER_ERROR,
    SchedulerEventType.DEAD_EXECUTION,
)


def _end_to_end(engine, configure):
    recorder = EventRecorder()
    one_time_runs = []
    recurring_runs = []
    lock = threading.Lock()

    def one_time(instance, ctx):
        with lock:
            one_time_runs.append(instance.id)

    every_10ms = OnCompleteReschedule(Schedules.fixed_delay(timedelta(milliseconds=10)))

    def recurring(instance, ctx):
        with lock:
            recurring_runs.append(instance.id)
        return every_10ms

    one = Tasks.one_time("one-time").execute(one_time)
    rec = Tasks.custom("recurring-custom").execute(recurring)
    builder = (
        Scheduler.create(engine, one, rec)
        .polling_interval(timedelta(milliseconds=10))
        .scheduler_name("test")
        .shutdown_max_wait(timedelta(seconds=5))
        .add_listener(recorder)
    )
    scheduler = configure(builder).build()
    scheduler.schedule(one.instance("id1"))
    scheduler.schedule(one.instance("id1"))  # a duplicate is ignored
    for i in range(1, 5):
        scheduler.schedule(rec.instance(str(i)))
    scheduler.start()
    try:
        wait_until(lambda: len(recorder.successes()) >= 12, timeout=10, message="12 completions")
    finally:
        scheduler.stop()
    assert all(recorder.count(e) == 0 for e in FAILURE_EVENTS), recorder.scheduler_events
    assert len(recurring_runs) > 10
    assert one_time_runs == ["id1"]
    assert scheduler.get_currently_executing() == []


def test_fetch_end_to_end(engine):
    _end_to_end(engine, lambda b: b.poll_using_fetch(0, 3.0).heartbeat_interval(timedelta(milliseconds=100)))


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_lock_and_fetch_end_to_end(engine):
    _end_to_end(
        engine,
        lambda b: b.poll_using_lock_and_fetch(0.5, 1.0).heartbeat_interval(timedelta(milliseconds=500)),
    )


@pytest.mark.dialects("sqlite")
def test_lock_and_fetch_is_refused_on_sqlite(engine):
    with pytest.raises(ValueError, match="SKIP LOCKED.*sqlite.*poll_using_fetch"):
        Scheduler.create(engine).poll_using_lock_and_fetch().build()


def _client(engine, *tasks, **kw):
    return SchedulerClient(engine, tasks, **kw)


def test_round_trip_with_and_without_data(engine):
    task = Tasks.one_time("t", data_type=str).execute(lambda i, c: None)
    client = _client(engine, task)
    at = datetime(2024, 5, 1, 10, 30, 15, 123000, tzinfo=UTC)
    client.schedule(task.instance("with", "my data"), at)
    client.schedule(task.instance("without"), at)
    with_data = client.get_scheduled_execution(("t", "with"))
    assert with_data.data == "my data"
    assert with_data.execution_time == at
    assert client.get_scheduled_execution(("t", "without")).data is None
    prio = _client(engine, task, priority_enabled=True)
    assert prio.get_scheduled_execution(("t", "with")).data == "my data"


def test_data_can_change_and_be_cleared_across_reschedules(engine):
    task = Tasks.one_time("t", data_type=int).execute(lambda i, c: None)
    client = _client(engine, task)
    client.schedule(task.instance("1", 1), timedelta(hours=1))
    client.reschedule(("t", "1"), timedelta(hours=2), 2)
    assert client.get_scheduled_execution(("t", "1")).data == 2
    execution = client.get_scheduled_execution(("t", "1")).execution
    client.repository.reschedule(
        execution,
        execution.execution_time,
        last_success=None,
        last_failure=None,
        consecutive_failures=0,
        new_data=None,
    )
    assert client.get_scheduled_execution(("t", "1")).data is None


@pytest.mark.parametrize("column", ["execution_time", "last_success", "last_failure", "last_heartbeat"])
def test_far_future_timestamps_round_trip(engine, column):
    task = Tasks.one_time("t").execute(lambda i, c: None)
    client = _client(engine, task)
    far = datetime(2500, 1, 1, 12, 0, tzinfo=UTC)
    assert far == NEVER
    client.schedule(task.instance("1"), far if column == "execution_time" else timedelta(0))
    repo = client.repository
    row = repo.get_execution("t", "1")
    if column in ("last_success", "last_failure"):
        repo.reschedule(
            row,
            row.execution_time,
            last_success=far if column == "last_success" else None,
            last_failure=far if column == "last_failure" else None,
            consecutive_failures=0,
        )
    elif column == "last_heartbeat":
        picked = repo.pick(row, far)
        assert picked is not None
    assert getattr(repo.get_execution("t", "1"), column) == far


def test_instants_round_trip_whatever_zone_they_were_given_in(engine):
    task = Tasks.one_time("t").execute(lambda i, c: None)
    client = _client(engine, task)
    oslo = ZoneInfo("Europe/Oslo")
    instants = [
        datetime(2020, 1, 15, 11, 0, tzinfo=UTC),
        datetime(2020, 7, 15, 11, 0, tzinfo=UTC),
        # just before and after both 2020 DST switches in Europe
        datetime(2020, 3, 29, 0, 59, 59, 999000, tzinfo=UTC),
        datetime(2020, 3, 29, 1, 0, 0, 1000, tzinfo=UTC),
        datetime(2020, 10, 25, 0, 59, 59, 999000, tzinfo=UTC),
        datetime(2020, 10, 25, 1, 0, 0, 1000, tzinfo=UTC),
    ]
    for i, instant in enumerate(instants):
        client.schedule(task.instance(str(i)), instant.astimezone(oslo))
    for i, instant in enumerate(instants):
        got = client.get_scheduled_execution(("t", str(i))).execution_time
        assert got == instant
        assert got.utcoffset() == timedelta(0)
    cet = datetime(2020, 2, 1, 12, 0, tzinfo=ZoneInfo("CET"))
    client.schedule(task.instance("cet"), cet)
    assert client.get_scheduled_execution(("t", "cet")).execution_time == cet.astimezone(UTC)


def test_rows_as_db_scheduler_writes_them_read_the_same(database, dialect):
    """A row inserted with db-scheduler's own encodings — not through our code."""
    engine = database.engine()
    create_table(engine)
    at = datetime(2024, 3, 1, 8, 15, 30, 250000, tzinfo=UTC)
    if dialect == "sqlite":
        params = {"t": int(at.timestamp() * 1000), "p": 0}
    elif dialect == "postgres":
        params = {"t": at, "p": False}
    else:
        params = {"t": at.replace(tzinfo=None), "p": 0}
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO scheduled_tasks (task_name, task_instance, task_data, execution_time, picked, version) "
                "VALUES ('java', 'row', :d, :t, :p, 1)"
            ),
            {"d": b'{"amount":12}', **params},
        )
    task = Tasks.one_time("java", data_type=dict).execute(lambda i, c: None)
    execution = _client(engine, task).get_scheduled_execution(("java", "row"))
    assert execution.execution_time == at
    assert execution.data == {"amount": 12}
    assert execution.is_picked is False
    if dialect == "sqlite":
        with engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT typeof(execution_time), picked FROM scheduled_tasks")).one()
        assert stored == ("integer", 0)


@pytest.mark.dialects("mariadb", "mysql")
def test_tables_from_the_older_timestamp6_ddl_work_unchanged(database):
    engine = database.engine()
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "create table scheduled_tasks (task_name varchar(100) not null, task_instance varchar(100) not null, "
            "task_data blob, execution_time timestamp(6) not null, picked boolean not null, "
            "picked_by varchar(50), last_success timestamp(6) null, last_failure timestamp(6) null, "
            "consecutive_failures int, last_heartbeat timestamp(6) null, version bigint not null, "
            "priority smallint, primary key (task_name, task_instance))"
        )
        # a session in another zone must not shift what the scheduler stores
        conn.exec_driver_sql("SET time_zone = '-08:00'")
    ran = []
    task = Tasks.one_time("t").execute(lambda i, c: ran.append(i.id))
    scheduler = Scheduler.create(engine, task).polling_interval(timedelta(milliseconds=20)).build()
    at = datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=UTC)
    scheduler.schedule(task.instance("1"), at)
    assert scheduler.get_scheduled_execution(("t", "1")).execution_time == at
    with engine.connect() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        raw = conn.exec_driver_sql("SELECT execution_time FROM scheduled_tasks").scalar()
    assert raw == at.replace(tzinfo=None)
    with scheduler:
        wait_until(lambda: ran == ["1"], timeout=5)


def test_scrolling(engine):
    task = Tasks.one_time("t").execute(lambda i, c: None)
    client = _client(engine, task)
    base = datetime(2024, 1, 1, tzinfo=UTC)
    for i in range(1, 6):
        client.schedule(task.instance(str(i)), base + timedelta(seconds=10 + 10 * i))
    everything = client.get_scheduled_executions(ScheduledExecutionsFilter.all())
    third = everything[2].cursor

    def ids(f):
        return [e.instance_id for e in client.get_scheduled_executions(f)]

    f = ScheduledExecutionsFilter.all()
    assert ids(f.with_limit(3)) == ["1", "2", "3"]
    assert ids(f.with_before(third)) == ["2", "1"]
    assert ids(f.with_after(third)) == ["4", "5"]
    assert ids(f.with_after(everything[1].cursor).with_before(everything[3].cursor)) == ["3"]
    # the cursor survives being handed to a browser and back
    assert ExecutionTimeAndId.decode(third.encode()) == third


def test_manual_scheduler_executes_once(engine):
    clock = SettableClock(datetime.now(UTC).replace(microsecond=0))
    runs = []
    task = Tasks.one_time("t").execute(lambda i, c: runs.append(i.id))
    scheduler = Scheduler.create(engine, task).clock(clock).build()
    for i in range(5):
        scheduler.schedule(task.instance(str(i)), clock.now())
        assert scheduler.run_any_due_executions() == 1
    assert runs == ["0", "1", "2", "3", "4"]
    assert scheduler.run_any_due_executions() == 0
