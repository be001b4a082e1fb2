"""Execution history on every dialect: one row per finished run (succeeded, failed, dead,
revived, abandoned) with its fencing token, timings and error; read newest first with keyset
pages and per-task summaries; pruned per result and per task in bounded batches; a write that
fails never touches the run."""

from __future__ import annotations

import gc
import json
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ekbatan.distributed_jobs.scheduler import (
    CancelDeadExecution,
    FailureHandlers,
    HistoryRetention,
    RunResult,
    Scheduler,
    SchedulerClient,
    Tasks,
    history_table_name,
)
from ekbatan.distributed_jobs.scheduler._history.table import COLUMNS, HistoryTable
from ekbatan.distributed_jobs.scheduler._history.writer import BATCH, ROW_WIDTH, HistoryWriter
from testsupport import wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def fail(instance, ctx) -> None:
    raise ValueError(f"bad input {instance.data}")


OK = Tasks.one_time("ok").execute(lambda instance, ctx: None)
FLAKY = (
    Tasks.one_time("flaky")
    .on_failure(FailureHandlers.max_retries(1).retry_every(timedelta(minutes=1)).then_dead_letter())
    .execute(fail)
)


def build(engine, clock, *tasks, retention=None, keep_task_data=False) -> Scheduler:
    builder = Scheduler.create(engine, *tasks).clock(clock).scheduler_name("node-1").failure_logging("OFF")
    return builder.execution_history(retention=retention, keep_task_data=keep_task_data).build()


@pytest.fixture
def client(engine, clock) -> SchedulerClient:
    return SchedulerClient(engine, clock=clock)


def test_each_run_is_recorded_with_its_result_token_and_error(engine, clock, built, client):
    scheduler = build(engine, clock, OK, FLAKY)
    built.append(scheduler)
    client.schedule(OK.instance("o1", {"secret": "card"}), T0)
    client.schedule(FLAKY.instance("f1", 7), T0)
    scheduler.run_any_due_executions()  # o1 succeeds, f1 fails (retry in a minute)
    clock.advance(timedelta(minutes=1))
    scheduler.run_any_due_executions()  # f1 fails again: dead

    runs = client.history()
    assert (runs[0].task_name, runs[0].instance_id, runs[0].result, runs[0].attempt) == (
        "flaky",
        "f1",
        RunResult.DEAD,
        2,
    )
    # the first two finished at the same time: either order
    assert {(r.task_name, r.instance_id, r.result, r.attempt) for r in runs[1:]} == {
        ("ok", "o1", RunResult.SUCCEEDED, 1),
        ("flaky", "f1", RunResult.FAILED, 1),
    }
    dead = runs[0]
    assert dead.picked_by == "node-1"
    assert dead.version == 4  # the token the run held: inserted 1, claimed 2, retried 3, claimed 4
    assert dead.execution_time == T0 + timedelta(minutes=1) and dead.finished == clock.now()
    assert dead.duration_ms == 0  # the settable clock does not move during a run
    assert dead.error.error_class == "ValueError" and dead.error.message == "bad input 7"
    assert "ValueError: bad input 7" in dead.error.traceback
    ok = next(r for r in runs if r.task_name == "ok")
    assert ok.error.error_class is None and ok.raw_data is None  # no task data unless asked
    # filters
    assert [r.result for r in client.history("flaky", "f1", result="failed")] == [RunResult.FAILED]
    assert client.history("ok", since=clock.now()) == []
    assert [r.result for r in client.history(failed=True)] == [RunResult.DEAD, RunResult.FAILED]


def test_task_data_is_kept_only_when_asked(engine, clock, built, client):
    scheduler = build(engine, clock, OK, keep_task_data=True)
    built.append(scheduler)
    client.schedule(OK.instance("o1", {"order": 5}), T0)
    scheduler.run_any_due_executions()
    [run] = client.history()
    assert json.loads(run.raw_data) == {"order": 5}


def test_pages_newest_first_and_a_summary(engine, clock, built, client):
    scheduler = build(engine, clock, OK, FLAKY)
    built.append(scheduler)
    for n in range(5):
        client.schedule(OK.instance(f"o{n}"), T0)
        scheduler.run_any_due_executions()
        clock.advance(timedelta(seconds=1))
    client.schedule(FLAKY.instance("f1", 1), T0)
    scheduler.run_any_due_executions()

    first = client.history("ok", limit=2)
    second = client.history("ok", limit=2, before=first[-1].cursor)
    third = client.history("ok", limit=2, before=second[-1].cursor)
    assert [r.instance_id for r in first + second + third] == ["o4", "o3", "o2", "o1", "o0"]

    summary = {s.task_name: s for s in client.history_summary(since=T0)}
    assert (summary["ok"].runs, summary["ok"].failures, summary["ok"].last_result) == (
        5,
        0,
        RunResult.SUCCEEDED,
    )
    assert summary["ok"].p50_ms == 0.0 and summary["ok"].p95_ms == 0.0
    assert (summary["flaky"].runs, summary["flaky"].failures) == (1, 1)
    assert summary["ok"].last_finished == T0 + timedelta(seconds=4)


def test_pruning_keeps_each_result_its_time_and_caps_each_task(engine, clock, built, client):
    retention = HistoryRetention(
        succeeded=timedelta(days=1), failed=timedelta(days=3), max_runs_per_task=3, batch_size=2
    )
    scheduler = build(engine, clock, OK, FLAKY, retention=retention)
    built.append(scheduler)
    for n in range(6):
        client.schedule(OK.instance(f"o{n}"), clock.now())
        scheduler.run_any_due_executions()
        clock.advance(timedelta(minutes=1))
    client.schedule(FLAKY.instance("f1", 1), clock.now())
    scheduler.run_any_due_executions()
    table = scheduler.execution_history.table

    # the cap: the 3 newest runs of "ok" stay
    assert table.prune(clock.now(), retention) == 3
    assert [r.instance_id for r in client.history("ok")] == ["o5", "o4", "o3"]
    # two days on: successes are past their day, the failure is within its three
    clock.advance(timedelta(days=2))
    assert table.prune(clock.now(), retention) == 3
    assert [r.task_name for r in client.history()] == ["flaky"]
    clock.advance(timedelta(days=2))
    assert table.prune(clock.now(), retention) == 1
    assert client.history() == []


def test_pruning_stops_when_told_and_leaves_the_rest_for_next_time(engine, clock, built, client):
    retention = HistoryRetention(succeeded=timedelta(days=1), max_runs_per_task=None, batch_size=2)
    scheduler = build(engine, clock, OK, retention=retention)
    built.append(scheduler)
    for n in range(5):
        client.schedule(OK.instance(f"o{n}"), clock.now())
    scheduler.run_any_due_executions()
    clock.advance(timedelta(days=2))
    table = scheduler.execution_history.table
    asked = []

    def stopping() -> bool:  # one batch, then "the scheduler is stopping"
        asked.append(True)
        return len(asked) > 1

    assert table.prune(clock.now(), retention, stop=stopping) == 2
    assert table.prune(clock.now(), retention, budget=0.0) == 0  # no time left: nothing started
    assert table.prune(clock.now(), retention) == 3
    assert client.history() == []


def test_the_pruning_task_is_scheduled_and_its_own_runs_are_not_recorded(engine, clock, built, client):
    scheduler = build(engine, clock, OK)
    built.append(scheduler)
    scheduler.run_startup_tasks()
    assert client.get_scheduled_execution(("ekbatan-history-prune", "recurring")) is not None
    assert scheduler.run_any_due_executions() == 1
    assert client.history() == []


def test_a_dead_execution_is_recorded_revived_or_abandoned(engine, clock, built, client):
    cancelling = Tasks.one_time("fragile").on_dead_execution(CancelDeadExecution()).execute(lambda i, c: None)
    scheduler = build(engine, clock, OK, cancelling)
    built.append(scheduler)
    for task in (OK, cancelling):
        client.schedule(task.instance("x"), T0)
        execution = client.get_scheduled_execution((task.name, "x")).execution
        client.repository.pick(execution, clock.now())  # a worker that then vanished
    clock.advance(timedelta(hours=1))
    scheduler.run_dead_execution_detection()
    results = {r.task_name: r.result for r in client.history()}
    assert results == {"ok": RunResult.REVIVED, "fragile": RunResult.ABANDONED}


def test_a_history_write_that_fails_never_touches_the_run(engine, clock, built, client):
    scheduler = build(engine, clock, OK)
    built.append(scheduler)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {history_table_name('scheduled_tasks')}")
    client.schedule(OK.instance("o1"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert client.get_scheduled_execution(("ok", "o1")) is None  # ran and completed once
    assert scheduler.execution_history.writer.failed_rows == 1


def test_a_started_scheduler_writes_its_runs_off_the_hot_path(engine, built):
    done = threading.Event()
    task = Tasks.one_time("ok").execute(lambda instance, ctx: done.set())
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=200))
        .execution_history()
        .build()
    )
    built.append(scheduler)
    client = SchedulerClient(engine)
    scheduler.start()
    client.schedule(task.instance("o1"), datetime.now(UTC))
    assert done.wait(10)
    run = wait_until(lambda: client.history("ok"), timeout=10, message="the run's history row")[0]
    assert run.result is RunResult.SUCCEEDED and run.duration_ms is not None and run.duration_ms >= 0
    scheduler.stop()
    assert scheduler.execution_history.writer.failed_rows == 0


def test_history_is_off_unless_asked(engine, clock, built, client):
    scheduler = Scheduler.create(engine, OK).clock(clock).build()
    built.append(scheduler)
    client.schedule(OK.instance("o1"), T0)
    scheduler.run_any_due_executions()
    assert scheduler.execution_history is None and client.history() == []
    with pytest.raises(ValueError, match="succeeded must be a positive timedelta"):
        HistoryRetention(succeeded=timedelta(0))
    with pytest.raises(ValueError, match="max_runs_per_task must be at least 1"):
        HistoryRetention(max_runs_per_task=0)


def test_any_text_and_data_round_trip_through_the_batch_insert(engine, clock, built, client):
    message = "it's a \\ backslash, a 'quote', a \"double\", a % and ünïcode; DROP TABLE x; --"

    def awkward(instance, ctx):
        raise ValueError(message)

    task = Tasks.one_time("awkward").execute(awkward)
    scheduler = build(engine, clock, task, keep_task_data=True)
    built.append(scheduler)
    client.schedule(task.instance("a'1", {"text": message}), T0)
    scheduler.run_any_due_executions()
    [run] = client.history("awkward")
    assert run.instance_id == "a'1"
    assert run.error.message == message and message in run.error.traceback
    assert json.loads(run.raw_data) == {"text": message}


def test_a_time_in_any_zone_is_kept_as_its_instant(engine, clock, built, client):
    built.append(build(engine, clock, OK))
    table = HistoryTable(client.repository)
    finished = datetime(2024, 1, 1, 14, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=2)))
    started = datetime(2024, 1, 1, 6, 59, 59, tzinfo=timezone(timedelta(hours=-5)))
    row = dict.fromkeys(("picked_by", "version", "duration_ms", "attempt", "task_data"))
    row |= dict.fromkeys(("error_class", "error_message", "error_traceback"))
    row |= {"task_name": "zones", "task_instance": "z1", "result": RunResult.SUCCEEDED}
    # the engine's own times are in UTC; a time given in another zone is the same instant
    table.insert([table.encode(row | {"execution_time": T0, "started": started, "finished": finished})])
    [run] = client.history("zones")
    assert run.execution_time == T0
    assert run.started == datetime(2024, 1, 1, 11, 59, 59, tzinfo=UTC)
    assert run.finished == datetime(2024, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def test_a_started_writer_writes_succeeded_runs_and_failed_rows_of_one_batch(engine, clock, built, client):
    """A succeeded run is queued as it is and becomes its row on the writer's thread; a failed
    one is queued as a row built where it ran: one flush writes both kinds, and neither kind
    waits for a flush under way."""
    scheduler = build(engine, clock, OK, FLAKY)
    built.append(scheduler)
    writer = scheduler.execution_history.writer
    writer.start()  # rows wait for the writer's thread, not written at once by the worker
    try:
        client.schedule(OK.instance("o1"), T0)
        client.schedule(FLAKY.instance("f1", 3), T0)
        with writer._lock:  # the flusher waits: both runs are queued, in one batch
            runs = threading.Thread(target=scheduler.run_any_due_executions, daemon=True)
            runs.start()
            runs.join(10)
            assert not runs.is_alive(), "a run waited for the history's flush"
            # the succeeded run as its fields, the failed one as its row
            assert sorted(len(item) == ROW_WIDTH for item in writer._queue) == [False, True]
    finally:
        writer.stop()
    assert writer.written_rows == 2 and writer.failed_rows == 0
    runs = {r.task_name: r for r in client.history()}
    assert (runs["ok"].result, runs["ok"].attempt, runs["ok"].picked_by) == (RunResult.SUCCEEDED, 1, "node-1")
    assert runs["ok"].error.error_class is None
    assert (runs["flaky"].result, runs["flaky"].error.message) == (RunResult.FAILED, "bad input 3")


@pytest.mark.parametrize("keep", [False, True])
def test_a_succeeded_run_waits_as_plain_values_with_its_data_only_if_kept(engine, clock, built, client, keep):
    """What waits for the writer is a tuple of plain values, which the garbage collector stops
    scanning, not the run object; it holds the task data only when the data is to be kept."""
    scheduler = build(engine, clock, OK, keep_task_data=keep)
    built.append(scheduler)
    writer = scheduler.execution_history.writer
    writer.start()
    large = "x" * 50_000
    try:
        client.schedule(OK.instance("small", "x"), T0)
        client.schedule(OK.instance("large", large), T0)
        with writer._lock:  # the flusher waits while both runs are queued
            runs = threading.Thread(target=scheduler.run_any_due_executions, daemon=True)
            runs.start()
            runs.join(10)
            assert not runs.is_alive(), "a run waited for the history's flush"
            queued = list(writer._queue)
            gc.collect()
            assert len(queued) == 2 and not any(gc.is_tracked(item) for item in queued)
            assert {item[-1] for item in queued} == ({b'"x"', json.dumps(large).encode()} if keep else {None})
    finally:
        writer.stop()
    assert {r.instance_id for r in client.history("ok")} == {"small", "large"}


def test_a_writer_woken_by_a_full_batch_leaves_the_rest_for_the_next(engine, clock, built, client):
    """Woken by a full batch, the writer writes full batches only; what remains waits for the next
    one or for the interval (a batch costs far more than a row)."""
    scheduler = build(engine, clock, OK)
    built.append(scheduler)
    writer = scheduler.execution_history.writer
    row = HistoryTable.encode(
        dict.fromkeys(COLUMNS)
        | {"task_name": "ok", "execution_time": T0, "finished": T0, "result": "succeeded"}
    )
    writer._queue.extend((*row[:1], f"i{i}", *row[2:]) for i in range(BATCH + 200))
    writer.flush(whole=False)
    assert (writer.written_rows, len(writer._queue)) == (BATCH, 200)
    writer.flush()
    assert (writer.written_rows, len(writer._queue)) == (BATCH + 200, 0)
    assert len(client.history("ok", limit=BATCH + 500)) == BATCH + 200


def test_a_run_whose_row_cannot_be_built_is_a_failed_write_not_the_writers_end(engine, clock, built, client):
    built.append(build(engine, clock, OK))

    def broken(run: object) -> tuple:
        raise ValueError("no row for this run")

    writer = HistoryWriter(HistoryTable(client.repository), broken)
    writer._queue.append(("a run's fields",))  # not a row's width: handed to row_of
    writer.flush()
    assert (writer.failed_rows, writer.written_rows) == (1, 0)
    row = HistoryTable.encode(
        dict.fromkeys(COLUMNS)
        | {
            "task_name": "ok",
            "task_instance": "after",
            "execution_time": T0,
            "finished": T0,
            "result": "succeeded",
        }
    )
    writer.submit(row)  # not started: written at once, by the same writer
    assert writer.written_rows == 1 and [r.instance_id for r in client.history("ok")] == ["after"]


def test_a_batch_larger_than_one_statement_takes_is_written_whole(engine, clock, built, client):
    """Rows that keep task data (up to 64 KiB, what MySQL's BLOB holds): a batch of them can be
    more than MySQL takes in one statement (its ``max_allowed_packet``, 16 MiB by default on
    MariaDB), so it goes in several, still in one transaction."""
    built.append(build(engine, clock, OK, keep_task_data=True))
    table = HistoryTable(client.repository)
    data = bytes(range(256)) * 192  # 48 KiB, written as 96 KiB of hex in a MySQL literal
    base = dict.fromkeys(COLUMNS) | {"task_name": "big", "execution_time": T0, "finished": T0}
    count = 200  # 19 MiB of literals
    rows = [
        table.encode(base | {"task_instance": f"b{i}", "result": "succeeded", "task_data": data})
        for i in range(count)
    ]
    table.insert(rows)
    runs = client.history("big", limit=count + 1)
    assert sorted(r.instance_id for r in runs) == sorted(f"b{i}" for i in range(count))
    assert all(r.raw_data == data for r in runs)
