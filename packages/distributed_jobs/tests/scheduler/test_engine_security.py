"""Hostile input against the engine: pickled task data is never loaded unless pickle was chosen,
every value travels as a bound parameter, and table names are plain identifiers or refused."""

from __future__ import annotations

import os
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    PickleSerializer,
    Scheduler,
    SchedulerClient,
    SettableClock,
    TaskInstanceNotFoundError,
    TaskKeyTooLongError,
    Tasks,
)
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.distributed_jobs.scheduler.schema import validate_table_name

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
#: characters a task name or instance id may have (the key columns on MySQL/MariaDB)
KEY_LIMIT = 100

# Values that break SQL built by string splicing, or that a driver might mangle.
HOSTILE = {
    "quotes": 'it\'s "quoted" `back`',
    "statement": "x'; DROP TABLE scheduled_tasks; --",
    "backslashes": "C:\\temp\\'\\\\",
    "nul": "before\x00after",
    "emoji": "🦄 naïve 漢字 🚀",
    "long": "ŝ;'\\" * 2_500,  # 10,000 characters
}


class CreatesMarker:
    """Unpickling this object creates the marker directory: a stand-in for arbitrary code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def crafted_pickle(marker: Path) -> bytes:
    return pickle.dumps(CreatesMarker(marker))


def store_raw(client: SchedulerClient, task_name: str, instance_id: str, raw: bytes, when: datetime) -> None:
    """Write a row as another program (or an attacker with table access) could."""
    assert client.repository.create_if_not_exists(NewExecution(task_name, instance_id, when, raw))


# ------------------------------------------------------------------ pickle is opt-in
def test_the_crafted_payload_does_run_code_under_the_pickle_serializer(
    engine, clock, manual, tmp_path, dialect
):
    # The control: proves the payload below is live, so its silence elsewhere means something.
    marker = tmp_path / "pwned"
    task = Tasks.one_time("payload").execute(lambda instance, ctx: None)
    client = SchedulerClient(engine, [task], clock=clock, serializer=PickleSerializer())
    store_raw(client, "payload", "1", crafted_pickle(marker), T0)
    client.get_scheduled_execution(("payload", "1")).data  # noqa: B018 - loading is the point
    assert marker.exists()


def test_a_crafted_pickle_is_never_loaded_by_the_default_serializer(engine, clock, manual, tmp_path, dialect):
    marker = tmp_path / "pwned"
    ran: list[object] = []
    task = Tasks.one_time("payload").execute(lambda instance, ctx: ran.append(instance.data))
    client = SchedulerClient(engine, [task], clock=clock)
    store_raw(client, "payload", "1", crafted_pickle(marker), T0)

    # The client: get, the listing, the raw bytes of an unknown task.
    shown = client.get_scheduled_execution(("payload", "1"))
    with pytest.raises(Exception, match="not UTF-8 JSON"):
        shown.data  # noqa: B018
    for listed in client.get_scheduled_executions():
        with pytest.raises(Exception, match="not UTF-8 JSON"):
            listed.data  # noqa: B018
    unknown = SchedulerClient(engine, [], clock=clock).get_scheduled_execution(("payload", "1"))
    assert unknown.data == crafted_pickle(marker)

    # A scheduler running it: the execution fails on decoding; the task never runs.
    scheduler = manual(task)
    assert scheduler.run_any_due_executions() == 1
    assert ran == []
    failed = client.get_scheduled_execution(("payload", "1")).execution
    assert failed.consecutive_failures == 1

    assert not marker.exists()


# ------------------------------------------------------------------ parameterised SQL
def refused_clearly(dialect: str, value: str, error: BaseException) -> bool:
    """PostgreSQL's text cannot hold NUL. Anything else must round-trip."""
    text = str(error)
    if dialect == "postgres" and "\x00" in value:
        return "NUL" in text
    return False


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_names_ids_and_data_round_trip_or_are_refused(engine, clock, manual, kind, dialect):
    value = HOSTILE[kind]
    seen: list[tuple[str, object]] = []
    data = {"text": value, value: [value]}
    if len(value) > KEY_LIMIT:
        # Longer than the key columns hold on MySQL/MariaDB: refused on every dialect alike,
        # before anything is written, naming the limit.
        with pytest.raises(ValueError, match=f"more than the {KEY_LIMIT}"):
            Tasks.one_time(value)
        task = Tasks.one_time("hostile").execute(lambda instance, ctx: None)
        with pytest.raises(TaskKeyTooLongError, match=f"more than the {KEY_LIMIT}"):
            SchedulerClient(engine, [task], clock=clock).schedule(task.instance(value, data), T0)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar_one() == 0
        return
    task = Tasks.one_time(value).execute(lambda instance, ctx: seen.append((instance.id, instance.data)))
    client = SchedulerClient(engine, [task], clock=clock)

    try:
        client.schedule(task.instance(value, data), T0)
    except Exception as error:
        assert refused_clearly(dialect, value, error), f"{kind}: {type(error).__name__}: {error}"
        # The refused name also fails cleanly as a lookup, and the table is intact.
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar_one() == 0
        return

    got = client.get_scheduled_execution((value, value))
    assert (got.task_name, got.instance_id, got.data) == (value, value, data)
    [listed] = client.get_scheduled_executions()
    assert (listed.task_name, listed.instance_id, listed.data) == (value, value, data)

    client.schedule(task.instance(value + "-2", data), T0 + timedelta(days=1))
    client.cancel((value, value + "-2"))
    with pytest.raises(TaskInstanceNotFoundError):
        client.cancel((value, value + "-2"))

    scheduler = manual(task)
    assert scheduler.run_any_due_executions() == 1
    assert seen == [(value, data)]
    assert client.get_scheduled_executions() == []
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar_one() == 0


# ------------------------------------------------------------------ identifiers
@pytest.mark.parametrize(
    "name",
    [
        "x; DROP TABLE y",
        'scheduled_tasks"; --',
        "`scheduled_tasks`",
        '"Quoted"',
        "tasks--",
        "a.b.c",
        "9tasks",
        "",
        "t" * 64,
        "Scheduled_Tasks",
    ],
)
def test_a_table_name_that_is_not_a_plain_identifier_is_refused(engine, name):
    with pytest.raises(ValueError) as refused:
        Scheduler.create(engine).table_name(name)
    message = str(refused.value)
    assert repr(name) in message
    assert "e.g. 'scheduled_tasks'" in message
    with pytest.raises(ValueError, match="e.g. 'scheduled_tasks'"):
        SchedulerClient(engine, [], table_name=name)


def test_an_upper_case_table_name_is_refused_with_its_lower_case_form():
    # PostgreSQL folds the unquoted name, its catalog does not: create_table would run twice.
    with pytest.raises(ValueError, match="write 'my_tasks'"):
        validate_table_name("My_Tasks")


def test_plain_table_names_are_accepted():
    for name in ("scheduled_tasks", "jobs.scheduled_tasks", "_t1", "t" * 63):
        assert validate_table_name(name) == name


def test_a_custom_table_name_is_used_as_written(database, clock: SettableClock, dialect):
    engine = database.engine()
    try:
        from ekbatan.distributed_jobs.scheduler import create_table

        create_table(engine, "my_tasks")
        task = Tasks.one_time("t").execute(lambda instance, ctx: None)
        client = SchedulerClient(engine, [task], clock=clock, table_name="my_tasks")
        client.schedule(task.instance("1"), T0)
        with engine.connect() as connection:
            assert connection.execute(sa.text("SELECT task_instance FROM my_tasks")).scalars().all() == ["1"]
    finally:
        engine.dispose()
