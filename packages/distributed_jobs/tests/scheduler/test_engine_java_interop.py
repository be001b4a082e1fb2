"""Sharing ``scheduled_tasks`` with Java's db-scheduler: tables created without the optional
``priority`` column, NULL priorities sorted as db-scheduler sorts them, task data as Java's
serializers write and read it, and a default scheduler name unique per process."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    JsonSerializer,
    Scheduler,
    SchedulerClient,
    TableSchemaError,
    Tasks,
    ddl_statements,
    priority_column_ddl,
)
from ekbatan.distributed_jobs.scheduler._options import default_scheduler_name
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect
from testsupport import wait_until

AT = datetime(2024, 3, 1, 8, 15, 30, 250000, tzinfo=UTC)


def _table_without_priority(engine: sa.Engine) -> None:
    """db-scheduler's DDL as it was before priorities: no ``priority`` column, no its index."""
    dialect = resolve_dialect(engine).dialect
    with engine.begin() as conn:
        for statement in ddl_statements(dialect):
            if statement.upper().startswith("CREATE INDEX PRIORITY"):
                continue
            statement = re.sub(r",\s*INDEX priority_execution_time_idx \([^)]*\)", "", statement)
            statement = re.sub(r"\s*priority SMALLINT,", "", statement)
            conn.exec_driver_sql(statement)
    with engine.connect() as conn:
        columns = [c["name"] for c in sa.inspect(conn).get_columns("scheduled_tasks")]
    assert "priority" not in columns and "version" in columns


def _java_row(engine: sa.Engine, dialect: str, task: str, instance: str, data: bytes | None, **extra) -> None:
    """Insert a row with db-scheduler's own encodings, not through our code."""
    if dialect == "sqlite":
        params = {"t": int(AT.timestamp() * 1000), "p": 0}
    elif dialect == "postgres":
        params = {"t": AT, "p": False}
    else:
        params = {"t": AT.replace(tzinfo=None), "p": 0}
    columns = "task_name, task_instance, task_data, execution_time, picked, version"
    values = ":n, :i, :d, :t, :p, 1"
    if "priority" in extra:
        columns += ", priority"
        values += ", :priority"
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO scheduled_tasks ({columns}) VALUES ({values})"),
            {"n": task, "i": instance, "d": data, **params, **extra},
        )


def _stored_data(engine: sa.Engine, instance: str) -> bytes | None:
    with engine.connect() as conn:
        raw = conn.execute(
            sa.text("SELECT task_data FROM scheduled_tasks WHERE task_instance = :i"), {"i": instance}
        ).scalar()
    return None if raw is None else bytes(raw)


# --------------------------------------------------------------------------- no priority column
@pytest.mark.parametrize("strategy", ["default", "fetch"])
def test_a_table_without_priority_runs_schedules_and_lists(database, strategy):
    engine = database.engine()
    _table_without_priority(engine)
    ran: list[str] = []
    lock = threading.Lock()

    def run(instance, ctx):
        with lock:
            ran.append(instance.id)

    task = Tasks.one_time("t", data_type=dict).execute(run)
    builder = Scheduler.create(engine, task).polling_interval(timedelta(milliseconds=50))
    if strategy == "fetch":
        builder.poll_using_fetch()
    scheduler = builder.build()
    scheduler.schedule(task.instance("later", {"n": 1}), timedelta(hours=1))
    listed = scheduler.get_scheduled_executions()
    assert [(e.instance_id, e.data) for e in listed] == [("later", {"n": 1})]
    assert listed[0].execution.priority is None
    assert scheduler.get_scheduled_execution(("t", "later")).data == {"n": 1}
    with scheduler:
        for i in range(20):
            scheduler.schedule(task.instance(str(i), {"n": i}), datetime.now(UTC))
        wait_until(lambda: len(ran) == 20, timeout=30, message="20 executions ran")
    assert sorted(ran, key=int) == [str(i) for i in range(20)]
    assert [e.instance_id for e in SchedulerClient(engine, [task]).get_scheduled_executions()] == ["later"]
    summary = scheduler.get_scheduled_executions_summary_by_task()
    assert [(s.task_name, s.instance_count) for s in summary] == [("t", 1)]


def test_enable_priority_on_a_table_without_it_is_refused_with_the_ddl(database, caplog):
    engine = database.engine()
    _table_without_priority(engine)
    dialect = resolve_dialect(engine)
    task = Tasks.one_time("t").execute(lambda i, c: None)
    scheduler = Scheduler.create(engine, task).enable_priority().build()
    with pytest.raises(TableSchemaError) as refused:
        scheduler.start()
    message = str(refused.value)
    assert "has no priority column" in message
    assert "ALTER TABLE scheduled_tasks ADD COLUMN priority SMALLINT" in message
    assert "priority_execution_time_idx" in message
    assert scheduler.is_shutting_down  # nothing of the failed start goes on running
    caplog.set_level(logging.INFO, logger="ekbatan")
    scheduler.stop()  # the usual try/finally after a failed start: harmless, and no warning
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    with pytest.raises(TableSchemaError, match="has no priority column"):
        SchedulerClient(engine, [task], priority_enabled=True).schedule(task.instance("1"), AT)

    # the DDL the message gives works, and priority ordering then runs
    with engine.begin() as conn:
        for statement in priority_column_ddl(dialect):
            conn.exec_driver_sql(statement)
    ran: list[str] = []
    ordered = Tasks.one_time("o").execute(lambda i, c: ran.append(i.id))
    # both scheduled before the scheduler starts: a poll already under way when pause() is
    # called could otherwise find "low" alone
    client = SchedulerClient(engine, [ordered], priority_enabled=True)
    client.schedule(ordered.instance("low", priority=1), AT)
    client.schedule(ordered.instance("high", priority=9), AT + timedelta(seconds=1))
    with Scheduler.create(engine, ordered).enable_priority().threads(1).build():
        wait_until(lambda: len(ran) == 2, timeout=30, message="both executions ran")
    assert ran == ["high", "low"]


def test_priority_ddl_names_the_index_after_a_custom_table():
    assert priority_column_ddl("postgresql", "jobs.tasks") == [
        "ALTER TABLE jobs.tasks ADD COLUMN priority SMALLINT",
        "CREATE INDEX jobs_tasks_priority_execution_time_idx ON jobs.tasks (priority DESC, execution_time ASC)",
    ]
    assert priority_column_ddl("mariadb") == [
        "ALTER TABLE scheduled_tasks ADD COLUMN priority SMALLINT, "
        "ADD INDEX priority_execution_time_idx (priority DESC, execution_time ASC)"
    ]


def test_null_priorities_sort_where_db_scheduler_sorts_them(database, dialect):
    """db-scheduler orders by ``priority DESC, execution_time ASC`` on every database, so a NULL
    priority comes first on PostgreSQL (NULL is greater than any value there) and last on the
    others; the engine uses the same order, so both sides of a shared table agree."""
    engine = database.engine()
    from ekbatan.distributed_jobs.scheduler import create_table

    create_table(engine)
    for name, priority in (("p5", 5), ("none", None), ("p1", 1)):
        _java_row(engine, dialect, "t", name, b"null", priority=priority)
    task = Tasks.one_time("t").execute(lambda i, c: None)
    client = SchedulerClient(engine, [task], priority_enabled=True)
    due = [e.instance_id for e in client.repository.get_due(AT + timedelta(seconds=1), 10)]
    with engine.connect() as conn:
        by_database = conn.execute(
            sa.text("SELECT task_instance FROM scheduled_tasks ORDER BY priority DESC, execution_time ASC")
        ).scalars()
        assert due == list(by_database)
    assert due == (["none", "p5", "p1"] if dialect == "postgres" else ["p5", "p1", "none"])


# --------------------------------------------------------------------------- task data
@dataclasses.dataclass
class Payment:
    account: str
    amount: int


def test_no_data_is_written_as_json_null_and_sql_null_still_reads_as_none():
    serializer = JsonSerializer()
    assert serializer.serialize(None) == b"null"
    assert serializer.deserialize(Payment, None) is None
    assert serializer.deserialize(Payment, b"null") is None
    assert serializer.deserialize(None, None) is None


def test_rows_written_as_java_writes_them_run_here(database, dialect):
    """task_data SQL NULL (db-scheduler's default serializer, no data), the JSON text ``null``
    (Gson and Jackson, no data) and a Gson object all run with the data Java meant."""
    engine = database.engine()
    from ekbatan.distributed_jobs.scheduler import create_table

    create_table(engine)
    _java_row(engine, dialect, "pay", "sql-null", None)
    _java_row(engine, dialect, "pay", "json-null", b"null")
    _java_row(engine, dialect, "pay", "gson", b'{"account":"a-1","amount":12}')
    seen: dict[str, object] = {}
    lock = threading.Lock()

    def run(instance, ctx):
        with lock:
            seen[instance.id] = instance.data

    task = Tasks.one_time("pay", data_type=Payment).execute(run)
    listed = {e.instance_id: e.data for e in SchedulerClient(engine, [task]).get_scheduled_executions()}
    assert listed == {"sql-null": None, "json-null": None, "gson": Payment("a-1", 12)}
    with Scheduler.create(engine, task).polling_interval(timedelta(milliseconds=50)).build():
        wait_until(lambda: len(seen) == 3, timeout=30, message="the three Java rows ran")
    assert seen == {"sql-null": None, "json-null": None, "gson": Payment("a-1", 12)}


def test_rows_written_here_read_as_java_reads_them(engine):
    """Java's JSON serializers parse ``task_data`` bytes as UTF-8 JSON and fail on SQL NULL:
    without data the row holds ``null``; with data, compact JSON as Gson writes it."""
    task = Tasks.one_time("pay", data_type=Payment).execute(lambda i, c: None)
    client = SchedulerClient(engine, [task])
    client.schedule(task.instance("without"), AT)
    client.schedule(task.instance("with", Payment("a-1", 12)), AT)
    client.reschedule(("pay", "with"), AT, None)
    client.schedule(task.instance("unicode", Payment("ä€", 1)), AT)
    assert _stored_data(engine, "without") == b"null"
    assert _stored_data(engine, "with") == b"null"  # data cleared on reschedule: null again
    assert _stored_data(engine, "unicode") == '{"account":"ä€","amount":1}'.encode()
    assert json.loads(_stored_data(engine, "unicode")) == {"account": "ä€", "amount": 1}


# --------------------------------------------------------------------------- scheduler name
def test_the_default_name_is_host_and_process_id():
    name = default_scheduler_name()
    assert name == f"{socket.gethostname()[: 50 - len(str(os.getpid())) - 1]}-{os.getpid()}"
    assert len(name) <= 50


def test_a_long_host_name_is_cut_and_the_process_id_kept(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 80)
    name = default_scheduler_name()
    assert len(name) == 50
    assert name.endswith(f"-{os.getpid()}") and name.startswith("hhh")


def test_two_processes_on_one_host_get_different_default_names(tmp_path):
    import subprocess
    import sys

    code = "from ekbatan.distributed_jobs.scheduler._options import default_scheduler_name as n; print(n())"
    names = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(names) == 2, names
