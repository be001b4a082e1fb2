"""Bad input to the engine: each case is refused with an error naming the value and the fix, or
fails only itself, and nothing already stored is lost.

Covered elsewhere (not repeated here): undecodable data under a hand-driven scheduler
(test_engine_scheduling), rows of unknown tasks left alone, reported and deleted after
``delete_unresolved_after`` (test_engine_polling, test_engine_repository), duplicate
DistributedJob names (test_jobs_builder), duplicate handler names (test_leh_handlers).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from scheduler_repositories import RawBytesSerializer

from ekbatan.distributed_jobs.scheduler import (
    MAX_KEY_LENGTH,
    OnCompleteReplace,
    ScheduledExecutionsFilter,
    Scheduler,
    SchedulerClient,
    Schedules,
    SerializationError,
    TaskDataTooLargeError,
    TaskInstance,
    TaskKeyTooLongError,
    Tasks,
)
from testsupport import EventRecorder, wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
MYSQL_BLOB = 65_535


def noop(instance, ctx) -> None:
    pass


def stored(client: SchedulerClient) -> dict[tuple[str, str], bytes | None]:
    rows = client.get_scheduled_executions(ScheduledExecutionsFilter.all())
    return {(e.task_name, e.instance_id): e.execution.raw_data for e in rows}


# ------------------------------------------------------------------ keys longer than the columns


@pytest.mark.parametrize(
    ("task_name", "instance_id", "what"),
    [
        ("t" * (MAX_KEY_LENGTH + 1), "1", "task name"),
        ("task", "i" * (MAX_KEY_LENGTH + 1), "instance id"),
        ("task", "😀" * (MAX_KEY_LENGTH + 1), "instance id"),
    ],
)
def test_over_long_keys_are_refused_before_writing_on_every_dialect(
    engine, dialect, task_name, instance_id, what
):
    client = SchedulerClient(engine)
    client.schedule(TaskInstance("task", "kept", {"n": 1}), T0)
    before = stored(client)
    attempts = (
        lambda: client.schedule(TaskInstance(task_name, instance_id), T0),
        lambda: client.schedule_if_not_exists(TaskInstance(task_name, instance_id), T0),
        lambda: client.schedule_batch(
            [TaskInstance("task", "fine"), TaskInstance(task_name, instance_id)], T0
        ),
    )
    for attempt in attempts:
        with pytest.raises(TaskKeyTooLongError) as raised:
            attempt()
        message = str(raised.value)
        assert f"{what} " in message and f"{MAX_KEY_LENGTH + 1} characters" in message
        assert f"more than the {MAX_KEY_LENGTH}" in message and "use a shorter" in message
        assert isinstance(raised.value, ValueError)
    assert stored(client) == before  # the batch's valid row was not written either


def test_keys_of_exactly_the_limit_round_trip_on_every_dialect(engine, dialect):
    client = SchedulerClient(engine)
    keys = [("n" * MAX_KEY_LENGTH, "1"), ("task", "i" * MAX_KEY_LENGTH), ("task", "😀" * MAX_KEY_LENGTH)]
    for name, instance_id in keys:
        client.schedule(TaskInstance(name, instance_id), T0)
    assert set(stored(client)) == set(keys)


def test_a_task_whose_name_is_too_long_is_refused_where_it_is_defined():
    with pytest.raises(ValueError, match=rf"is {MAX_KEY_LENGTH + 1} characters.*choose a shorter name"):
        Tasks.one_time("t" * (MAX_KEY_LENGTH + 1)).execute(noop)
    assert Tasks.one_time("t" * MAX_KEY_LENGTH).execute(noop).name == "t" * MAX_KEY_LENGTH


def test_replacing_an_execution_by_an_over_long_key_keeps_the_original(manual, engine, dialect, caplog):
    replacement = TaskInstance("next", "x" * (MAX_KEY_LENGTH + 1))
    task = Tasks.custom("chain").execute(lambda instance, ctx: OnCompleteReplace(replacement))
    scheduler = manual(task)
    scheduler.schedule(TaskInstance("chain", "1", {"keep": "me"}), T0)
    scheduler.run_any_due_executions()
    assert "instance id 'xxxx" in caplog.text and "101 characters" in caplog.text
    # left picked with its data: dead-execution detection gives it back once the dead window passes
    assert stored(SchedulerClient(engine)) == {("chain", "1"): b'{"keep":"me"}'}


# ------------------------------------------------------------------ huge task data


@pytest.mark.dialects("mariadb", "mysql")
def test_task_data_larger_than_the_blob_column_is_refused_naming_the_size_and_the_fix(engine, dialect):
    client = SchedulerClient(engine, serializer=RawBytesSerializer())
    client.schedule(TaskInstance("big", "fits", b"x" * MYSQL_BLOB), T0)
    assert len(stored(client)[("big", "fits")]) == MYSQL_BLOB

    with pytest.raises(TaskDataTooLargeError) as raised:
        client.schedule(TaskInstance("big", "too-big", b"x" * (MYSQL_BLOB + 1)), T0)
    message = str(raised.value)
    assert "big/too-big" in message and "65,536 bytes" in message and "65,535" in message
    assert "task_data blob" in message and "put a reference" in message
    # 20 MB went past max_allowed_packet and dropped the connection before this check
    with pytest.raises(TaskDataTooLargeError):
        client.schedule(TaskInstance("big", "huge", b"x" * 20_000_000), T0)

    with pytest.raises(TaskDataTooLargeError):
        client.reschedule(("big", "fits"), T0 + timedelta(hours=1), b"y" * (MYSQL_BLOB + 1))
    row = client.get_scheduled_execution(("big", "fits")).execution
    assert (row.raw_data, row.execution_time) == (b"x" * MYSQL_BLOB, T0)  # unchanged
    assert set(stored(client)) == {("big", "fits")}


@pytest.mark.dialects("postgres", "sqlite")
def test_large_task_data_round_trips_where_the_column_has_no_small_limit(engine, dialect):
    client = SchedulerClient(engine, serializer=RawBytesSerializer())
    payload = bytes(range(256)) * 40_000  # 10 MB, every byte value
    client.schedule(TaskInstance("big", "1", payload), T0)
    assert stored(client)[("big", "1")] == payload


# ------------------------------------------------------------------ undecodable data, running scheduler


def test_a_running_scheduler_fails_only_the_undecodable_execution_and_keeps_its_bytes(engine, built, dialect):
    done: list[str] = []
    task = Tasks.one_time("mail", data_type=dict).execute(
        lambda instance, ctx: done.append(instance.data["to"])
    )
    raw = SchedulerClient(engine, serializer=RawBytesSerializer())
    garbage = b"\xff\xfe{not json"
    raw.schedule(TaskInstance("mail", "broken", garbage), datetime.now(UTC))
    recorder = EventRecorder()
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=100))
        .failure_logging("OFF")
        .add_listener(recorder)
        .build()
    )
    built.append(scheduler)
    with scheduler:
        for i in range(5):
            scheduler.schedule(task.instance(f"good-{i}", {"to": f"u{i}@example.org"}), datetime.now(UTC))
        wait_until(lambda: len(recorder.completed) == 6, 10, message="five good executions and one failure")
    assert sorted(done) == [f"u{i}@example.org" for i in range(5)]
    [failure] = recorder.failures()
    assert failure.execution.instance_id == "broken"
    assert isinstance(failure.cause, SerializationError) and "mail/broken" in str(failure.cause)
    row = raw.get_scheduled_execution(("mail", "broken")).execution
    assert (row.raw_data, row.consecutive_failures, row.picked) == (garbage, 1, False)


# ------------------------------------------------------------------ duplicate task names


def test_two_tasks_of_one_name_are_refused_when_the_scheduler_is_built(engine, built, dialect):
    first = Tasks.one_time("report").execute(noop)
    second = Tasks.recurring("report", Schedules.fixed_delay(timedelta(minutes=1))).execute(noop)
    hint = "two tasks are named 'report' .*task names must be unique: rename one of them"
    with pytest.raises(ValueError, match=hint):
        Scheduler.create(engine, first, second).build()
    with pytest.raises(ValueError, match=hint):
        Scheduler.create(engine, first).start_tasks(second).build()
    # one task object given twice (known and started) is one task
    scheduler = Scheduler.create(engine, second).start_tasks(second).build()
    built.append(scheduler)
    assert list(scheduler.repository.resolver.tasks) == ["report"]
