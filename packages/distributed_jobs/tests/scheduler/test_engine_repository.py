"""The SQL protocol of scheduled_tasks — claims, completions, heartbeats, dead rows —
on every dialect."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    ExecutionError,
    FailedToScheduleBatchError,
    ScheduledExecutionsFilter,
    Tasks,
)
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect
from testsupport import session_id, wait_until

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def noop(instance, ctx):
    return None


ONE = Tasks.one_time("one").execute(noop)
TWO = Tasks.one_time("two").execute(noop)


def repo(engine, *tasks, priority=False, name="node-1"):
    return TaskRepository(
        engine,
        resolve_dialect(engine),
        TaskResolver(tasks or (ONE, TWO)),
        picked_by=name,
        priority_enabled=priority,
    )


def new(task="one", id="1", at=NOW, data=None, priority=None):
    return NewExecution(task, id, at, data, priority)


def test_create_if_not_exists(engine):
    r = repo(engine)
    assert r.create_if_not_exists(new(id="a")) is True
    assert r.create_if_not_exists(new(id="a")) is False
    assert r.create_if_not_exists(new(id="b")) is True
    row = r.get_execution("one", "a")
    assert row is not None
    assert (row.version, row.picked, row.picked_by, row.consecutive_failures) == (1, False, None, 0)
    assert row.execution_time == NOW


def test_create_batch_inserts_all_or_fails_on_existing_key(engine):
    r = repo(engine)
    r.create_batch([new(id=str(i)) for i in range(5)])
    assert len(r.get_scheduled_executions(ScheduledExecutionsFilter.all())) == 5
    with pytest.raises(FailedToScheduleBatchError, match="one/10"):
        r.create_batch([new(id="10"), new(id="3"), new(id="11")])
    # the batch is one transaction: nothing of it stayed
    assert r.get_execution("one", "10") is None
    assert len(r.get_scheduled_executions(ScheduledExecutionsFilter.all())) == 5


def test_create_batch_keeps_every_value_as_given(engine):
    """A batch goes to the database in one statement where the dialect can (PostgreSQL: one
    array per column): ids that need escaping in an array literal, raw bytes, no data, NULL and
    set priorities, and each row's own time all come back exactly."""
    r = repo(engine, priority=True)
    ids = ["{a,b}", 'quote"d', "back\\slash", "NULL", "", " spaced ", "comma,", "ü𝄞"]
    rows = [
        new(
            id=i,
            at=NOW + timedelta(microseconds=n * 1000),
            data=bytes([0, n, 255]) if n % 2 else None,
            priority=n if n % 3 else None,
        )
        for n, i in enumerate(ids)
    ]
    r.create_batch(rows)
    for n, i in enumerate(ids):
        got = r.get_execution("one", i)
        assert got is not None, i
        assert (got.execution_time, got.raw_data, got.priority, got.version, got.picked) == (
            rows[n].execution_time,
            rows[n].raw_data,
            rows[n].priority,
            1,
            False,
        ), i


def test_get_due_is_inclusive_limited_and_ordered(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="now", at=NOW))
    r.create_if_not_exists(new(id="later", at=NOW + timedelta(seconds=1)))
    assert [e.instance_id for e in r.get_due(NOW, 10)] == ["now"]
    assert [e.instance_id for e in r.get_due(NOW - timedelta(seconds=1), 10)] == []
    times = [NOW - timedelta(seconds=random.randint(1, 10_000)) for _ in range(100)]
    r.create_batch([new(id=f"r{i}", at=t) for i, t in enumerate(times)])
    due = r.get_due(NOW, 200)
    assert len(due) == 101
    assert [e.execution_time for e in due] == sorted(e.execution_time for e in due)
    assert len(r.get_due(NOW, 1)) == 1
    assert len(r.get_due(NOW, 2)) == 2


def test_get_due_with_priority_orders_by_priority_then_time(engine, dialect):
    r = repo(engine, priority=True)
    r.create_if_not_exists(new(id="p1", at=NOW - timedelta(seconds=10), priority=1))
    r.create_if_not_exists(new(id="p2", at=NOW - timedelta(seconds=30), priority=2))
    r.create_if_not_exists(new(id="p3", at=NOW - timedelta(seconds=20), priority=3))
    r.create_if_not_exists(new(id="pnull", at=NOW - timedelta(seconds=40), priority=None))
    # db-scheduler's `priority DESC`: PostgreSQL sorts NULL above every value, the others below
    by_priority = ["p3", "p2", "p1"]
    expected = ["pnull", *by_priority] if dialect == "postgres" else [*by_priority, "pnull"]
    assert [e.instance_id for e in r.get_due(NOW, 10)] == expected
    plain = repo(engine)
    assert [e.instance_id for e in plain.get_due(NOW, 10)] == ["pnull", "p2", "p3", "p1"]


def test_priority_is_written_only_when_enabled(engine):
    repo(engine).create_if_not_exists(new(id="off", priority=7))
    repo(engine, priority=True).create_if_not_exists(new(id="on", priority=7))
    r = repo(engine)
    assert r.get_execution("one", "off").priority is None
    assert r.get_execution("one", "on").priority == 7


def test_get_due_excludes_picked_and_records_unknown_names_once(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    r.create_if_not_exists(new(id="2"))
    picked = r.pick(r.get_execution("one", "1"), NOW)
    assert picked is not None
    assert [e.instance_id for e in r.get_due(NOW, 10)] == ["2"]

    seen = []
    lonely = TaskRepository(engine, r.dialect, TaskResolver([TWO], on_unresolved=seen.append))
    assert lonely.get_due(NOW, 10) == []
    assert seen == ["one"]
    for k, name in enumerate(["u1", "u2", "u3"], start=2):
        r.create_if_not_exists(new(task=name, id="x"))
        assert lonely.get_due(NOW, 10) == []
        assert len(seen) == k, "each unknown name is recorded once"
    assert seen == ["one", "u1", "u2", "u3"]
    # the unresolved row's age counts from its execution time, not from discovery
    assert lonely.resolver.unresolved()["u1"] == NOW


def test_pick_claims_once_and_bumps_version(engine):
    r = repo(engine, name="picker")
    r.create_if_not_exists(new(id="1"))
    read = r.get_due(NOW, 10)[0]
    picked = r.pick(read, NOW + timedelta(seconds=1))
    assert picked is not None and picked.version == read.version + 1
    stored = r.get_execution("one", "1")
    assert stored.picked is True
    assert stored.picked_by == "picker"
    assert stored.last_heartbeat == NOW + timedelta(seconds=1)
    assert stored.version == 2
    assert r.pick(read, NOW) is None, "a second claim of the same read must fail"


def test_pick_after_reschedule_fails_on_stale_version(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    read = r.get_due(NOW, 10)[0]
    r.reschedule(read, NOW, last_success=None, last_failure=None, consecutive_failures=0)
    assert r.pick(read, NOW) is None


def test_picked_by_is_cut_to_50_characters(engine):
    r = repo(engine, name="n" * 80)
    r.create_if_not_exists(new(id="1"))
    r.pick(r.get_due(NOW, 1)[0], NOW)
    assert r.get_execution("one", "1").picked_by == "n" * 50


def test_reschedule_moves_clears_picked_and_keeps_or_replaces_data(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1", data=b"first"))
    picked = r.pick(r.get_due(NOW, 1)[0], NOW)
    later = NOW + timedelta(hours=1)
    r.reschedule(picked, later, last_success=NOW, last_failure=None, consecutive_failures=3)
    row = r.get_execution("one", "1")
    assert (row.execution_time, row.picked, row.picked_by, row.last_heartbeat) == (later, False, None, None)
    assert (row.last_success, row.consecutive_failures, row.version) == (NOW, 3, picked.version + 1)
    assert row.raw_data == b"first"
    r.reschedule(row, later, last_success=None, last_failure=NOW, consecutive_failures=4, new_data=b"second")
    assert r.get_execution("one", "1").raw_data == b"second"
    row = r.get_execution("one", "1")
    r.reschedule(row, later, last_success=None, last_failure=NOW, consecutive_failures=4, new_data=None)
    assert r.get_execution("one", "1").raw_data is None


def test_versioned_writes_reject_a_stale_version(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    read = r.get_execution("one", "1")
    r.reschedule(read, NOW, last_success=None, last_failure=None, consecutive_failures=0)
    with pytest.raises(ExecutionError) as err:
        r.remove(read)
    assert (err.value.task_name, err.value.instance_id, err.value.version) == ("one", "1", 1)
    with pytest.raises(ExecutionError):
        r.reschedule(read, NOW, last_success=None, last_failure=None, consecutive_failures=0)
    assert r.get_execution("one", "1").version == 2


def test_heartbeat_checks_but_never_bumps_version(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    picked = r.pick(r.get_due(NOW, 1)[0], NOW)
    assert r.update_heartbeat(picked, NOW + timedelta(minutes=1)) is True
    row = r.get_execution("one", "1")
    assert (row.last_heartbeat, row.version) == (NOW + timedelta(minutes=1), picked.version)
    stale = picked.with_changes(version=picked.version - 1)
    assert r.update_heartbeat(stale, NOW + timedelta(minutes=2)) is False


def test_replace_resets_version_and_bookkeeping(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1", data=b"old"))
    picked = r.pick(r.get_due(NOW, 1)[0], NOW)
    r.replace(picked, "two", "1b", NOW + timedelta(minutes=5), b"new")
    assert r.get_execution("one", "1") is None
    row = r.get_execution("two", "1b")
    assert (row.version, row.picked, row.raw_data, row.execution_time) == (
        1,
        False,
        b"new",
        NOW + timedelta(minutes=5),
    )


def test_dead_executions_by_heartbeat_age(engine):
    r = repo(engine)
    for i in range(3):
        r.create_if_not_exists(new(id=str(i)))
    for i, e in enumerate(r.get_due(NOW, 10)):
        r.pick(e, NOW - timedelta(minutes=10 * (i + 1)))
    r.create_if_not_exists(new(id="unpicked"))
    dead = r.get_dead_executions(NOW - timedelta(minutes=15))
    assert [e.instance_id for e in dead] == ["2", "1"], "ordered by last_heartbeat, oldest first"
    assert r.get_dead_executions(NOW + timedelta(days=1))[-1].instance_id == "0"


def test_dead_query_skips_and_records_previously_unknown_tasks(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    r.pick(r.get_due(NOW, 1)[0], NOW - timedelta(hours=1))
    seen = []
    lonely = TaskRepository(engine, r.dialect, TaskResolver([TWO], on_unresolved=seen.append))
    assert lonely.get_dead_executions(NOW) == []
    assert seen == ["one"]


def test_failing_longer_than(engine):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    row = r.get_execution("one", "1")
    r.reschedule(row, NOW, last_success=NOW, last_failure=None, consecutive_failures=0)
    row = r.get_execution("one", "1")
    r.reschedule(row, NOW, last_success=NOW, last_failure=NOW + timedelta(minutes=1), consecutive_failures=1)
    assert r.get_executions_failing_longer_than(NOW + timedelta(minutes=1) - timedelta(minutes=5)) == []
    assert len(r.get_executions_failing_longer_than(NOW + timedelta(minutes=1))) == 1


def test_listing_filters_and_summary(engine):
    r = repo(engine)
    r.create_batch([new(id=str(i), at=NOW + timedelta(seconds=i)) for i in range(100)])
    r.pick(r.get_execution("one", "0"), NOW)
    assert len(r.get_scheduled_executions(ScheduledExecutionsFilter.all().with_picked(False))) == 99
    assert len(r.get_scheduled_executions(ScheduledExecutionsFilter.all())) == 100

    r.create_if_not_exists(new(task="two", id="a"))
    r.create_if_not_exists(new(task="two", id="b"))
    r.create_if_not_exists(new(task="ghost", id="g"))
    assert len(r.get_scheduled_executions(ScheduledExecutionsFilter.all(), task_name="two")) == 2
    lonely = TaskRepository(engine, r.dialect, TaskResolver([ONE, TWO]))
    lonely.get_due(NOW + timedelta(days=1), 500)  # discovers "ghost"
    only = lonely.get_scheduled_executions(ScheduledExecutionsFilter.only_resolved())
    assert {e.task_name for e in only} == {"one", "two"}
    assert {e.task_name for e in lonely.get_scheduled_executions(ScheduledExecutionsFilter.all())} == {
        "one",
        "two",
        "ghost",
    }


def test_summary_by_task(engine):
    r = repo(engine)
    r.create_batch([new(id=str(i), at=NOW + timedelta(seconds=i)) for i in range(4)])
    rows = {e.instance_id: e for e in r.get_scheduled_executions(ScheduledExecutionsFilter.all())}
    r.pick(rows["0"], NOW)
    r.pick(rows["1"], NOW)
    r.reschedule(
        rows["2"], NOW + timedelta(seconds=2), last_success=None, last_failure=NOW, consecutive_failures=3
    )
    r.reschedule(
        rows["3"],
        NOW + timedelta(seconds=3),
        last_success=NOW - timedelta(hours=1),
        last_failure=None,
        consecutive_failures=0,
    )
    r.create_if_not_exists(new(task="ghost", id="g"))
    summary = {s.task_name: s for s in r.summary_by_task()}
    one = summary["one"]
    assert (one.instance_count, one.running_count, one.failing_count, one.scheduled_count) == (4, 2, 1, 1)
    assert one.earliest_execution_time == NOW
    assert one.last_success == NOW - timedelta(hours=1)
    assert one.last_failure == NOW
    assert one.max_consecutive_failures == 3
    assert summary["ghost"].instance_count == 1


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_lock_and_fetch_picks_due_rows_once(engine):
    r = repo(engine, name="locker")
    r.create_batch([new(id=str(i), at=NOW - timedelta(seconds=i)) for i in range(3)])
    r.create_if_not_exists(new(id="future", at=NOW + timedelta(hours=1)))
    picked = r.lock_and_fetch(NOW, 10)
    assert sorted(e.instance_id for e in picked) == ["0", "1", "2"]
    assert all(e.picked and e.picked_by == "locker" and e.version == 2 for e in picked)
    stored = r.get_execution("one", "0")
    assert (stored.picked, stored.version) == (True, 2)
    assert r.lock_and_fetch(NOW, 10) == []
    # an optimistic claim of a row that lock-and-fetch took fails
    assert r.pick(stored.with_changes(picked=False, version=2), NOW) is None


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_lock_and_fetch_never_leaves_unknown_rows_picked(engine):
    r = repo(engine)
    r.create_if_not_exists(new(task="ghost", id="g"))
    r.create_if_not_exists(new(id="1"))
    assert [e.instance_id for e in r.lock_and_fetch(NOW, 10)] == ["1"]
    ghost = r.get_execution("ghost", "g")
    assert (ghost.picked, ghost.version) == (False, 1)  # never claimed: its version untouched
    assert "ghost" not in r.resolver.unresolved_names()  # the claim never met it…
    assert r.record_unknown_due(NOW) == 1  # …the dead-execution pass looks for such rows
    assert "ghost" in r.resolver.unresolved_names()
    assert r.record_unknown_due(NOW) == 0  # and then leaves the recorded name out


def test_unpick_tolerates_missing_and_unpicked_rows(engine, caplog):
    r = repo(engine)
    r.create_if_not_exists(new(id="1"))
    r.create_if_not_exists(new(id="2"))
    picked = r.pick(r.get_execution("one", "1"), NOW)
    absent = picked.with_changes(instance_id="absent")
    assert r.unpick([]) == 0
    assert r.unpick([picked, r.get_execution("one", "2"), absent]) == 1
    row = r.get_execution("one", "1")
    assert (row.picked, row.picked_by, row.version) == (False, None, picked.version + 1)
    assert "failed to release" in caplog.text


def test_unpick_stops_at_the_first_database_error_with_one_line(engine, caplog):
    r = repo(engine)
    picked = []
    for instance in "123":
        r.create_if_not_exists(new(id=instance))
        picked.append(r.pick(r.get_execution("one", instance), NOW))
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {r.table_name}")  # every statement now fails
    caplog.set_level(logging.WARNING, logger="ekbatan")
    assert r.unpick(picked) == 0
    lines = [record for record in caplog.records if record.name.startswith("ekbatan")]
    assert len(lines) == 1, [record.getMessage() for record in lines]
    assert lines[0].levelno == logging.WARNING and lines[0].exc_info is None
    assert "could not release 3 picked execution(s)" in lines[0].getMessage()


def test_custom_table_name(database):
    from ekbatan.distributed_jobs.scheduler import create_table

    engine = database.engine()
    assert create_table(engine, "custom_tablename") is True
    assert create_table(engine, "custom_tablename") is False
    r = TaskRepository(engine, resolve_dialect(engine), TaskResolver([ONE]), table_name="custom_tablename")
    r.create_if_not_exists(new(id="1"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT task_instance FROM custom_tablename")).scalar() == "1"


@pytest.mark.parametrize("bad", ["scheduled tasks", "x;DROP TABLE y", "1abc", "", "a.b.c", "t-1"])
def test_table_name_must_be_an_identifier(bad):
    from ekbatan.distributed_jobs.scheduler import validate_table_name

    with pytest.raises(ValueError, match="invalid table name"):
        validate_table_name(bad)


def test_remove_many_deletes_exactly_the_versions_given(engine):
    r = repo(engine)
    r.create_batch([new(id=str(i)) for i in range(5)])
    rows = sorted(r.get_scheduled_executions(ScheduledExecutionsFilter.all()), key=lambda e: e.instance_id)
    stale = rows[0].with_changes(version=rows[0].version + 5)
    removed = r.remove_many([stale, *rows[1:4]])
    assert removed == {("one", "1"), ("one", "2"), ("one", "3")}
    left = {e.instance_id for e in r.get_scheduled_executions(ScheduledExecutionsFilter.all())}
    assert left == {"0", "4"}
    assert r.remove_many([rows[4]]) == {("one", "4")}
    assert r.remove_many([rows[4]]) == set()


def test_completion_batcher_reports_each_rows_own_outcome(engine):
    import threading

    from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher

    r = repo(engine)
    r.create_batch([new(id=str(i)) for i in range(40)])
    rows = r.get_scheduled_executions(ScheduledExecutionsFilter.all())
    stale = {"3", "17"}
    writer = CompletionBatcher(r, max_batch=7)
    writer.start()
    outcomes: dict[str, str] = {}
    start = threading.Barrier(len(rows))

    def complete(e):
        start.wait()
        target = e.with_changes(version=e.version + 1) if e.instance_id in stale else e
        try:
            writer.remove(target)
            outcomes[e.instance_id] = "removed"
        except ExecutionError:
            outcomes[e.instance_id] = "stale"

    threads = [threading.Thread(target=complete, args=(e,)) for e in rows]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    writer.stop()
    assert {k for k, v in outcomes.items() if v == "stale"} == stale
    assert sum(v == "removed" for v in outcomes.values()) == 38
    assert {e.instance_id for e in r.get_scheduled_executions(ScheduledExecutionsFilter.all())} == stale


def test_completion_batcher_without_a_thread_writes_at_once_and_drains_on_stop(engine):
    from ekbatan.distributed_jobs.scheduler._running.completion_batches import CompletionBatcher

    r = repo(engine)
    r.create_batch([new(id=str(i)) for i in range(5)])
    rows = sorted(r.get_scheduled_executions(ScheduledExecutionsFilter.all()), key=lambda e: e.instance_id)
    writer = CompletionBatcher(r)
    heard: list[object] = []
    writer.submit(rows[0], heard.append)  # not started: written here and now
    assert heard == [None]
    assert r.get_execution("one", "0") is None
    writer.start()
    for e in rows[1:]:
        writer.submit(e, heard.append)
    writer.stop()  # drains what was queued
    assert heard == [None] * 5
    assert r.get_scheduled_executions(ScheduledExecutionsFilter.all()) == []


def test_deadlocked_writes_are_retried_and_others_are_not():
    from sqlalchemy.exc import OperationalError

    from ekbatan.distributed_jobs.scheduler._table.retries import with_retries

    class Deadlock(Exception):
        sqlstate = "40P01"

    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise OperationalError("DELETE …", {}, Deadlock("deadlock detected"))
        return "written"

    assert with_retries(flaky) == "written"
    assert len(attempts) == 3

    class Broken(Exception):
        sqlstate = "42P01"

    def broken():
        attempts.append(1)
        raise OperationalError("DELETE …", {}, Broken("relation does not exist"))

    attempts.clear()
    with pytest.raises(OperationalError):
        with_retries(broken)
    assert len(attempts) == 1, "only concurrency failures are retried"


@pytest.mark.dialects("postgres", "mariadb")
def test_a_real_deadlock_is_classified_as_transient(database, dialect):
    import threading

    from sqlalchemy.exc import DBAPIError

    from ekbatan.distributed_jobs.scheduler._table.retries import is_transient

    engine = database.engine()
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE d (id INT PRIMARY KEY, v INT)")
        conn.exec_driver_sql("INSERT INTO d VALUES (1, 0), (2, 0)")
    errors = []
    barrier = threading.Barrier(2)

    def cross(first, second):
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"UPDATE d SET v = v + 1 WHERE id = {first}")
                barrier.wait(5)
                conn.exec_driver_sql(f"UPDATE d SET v = v + 1 WHERE id = {second}")
        except DBAPIError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=cross, args=(1, 2)), threading.Thread(target=cross, args=(2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) == 1, "the database picks one deadlock victim"
    assert is_transient(errors[0])


@pytest.mark.dialects("postgres")
@pytest.mark.parametrize("write", ["remove", "pick"])
def test_per_execution_writes_chosen_as_deadlock_victims_are_retried(engine, write):
    """A strict-mode completion and a fetch-mode claim are single autocommitted statements; when
    the server aborts one to break a deadlock, it is tried again, not reported as failed.

    The deadlock is real: a trigger makes the write lock counter rows 1 and 2 after the
    execution's. A gate transaction holds row 1 until a rival transaction, which holds row 2, waits
    for the execution's row; then the engine's write goes on to wait for row 2 and closes the
    cycle. PostgreSQL looks for a deadlock once per wait, deadlock_timeout after the wait starts,
    so the engine's wait (1 s) finds the cycle long before the rival's (10 s) would: the engine's
    write is the victim however slowly the test itself runs."""
    import threading

    task = Tasks.one_time("t").execute(noop)
    r = repo(engine, task)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE counter (id INT PRIMARY KEY, n INT)")
        conn.exec_driver_sql("INSERT INTO counter VALUES (1, 0), (2, 0)")
        conn.exec_driver_sql(
            "CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "UPDATE counter SET n = n + 1 WHERE id = 1; UPDATE counter SET n = n + 1 WHERE id = 2; "
            "RETURN COALESCE(NEW, OLD); END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER count_write BEFORE UPDATE OR DELETE ON scheduled_tasks "
            "FOR EACH ROW EXECUTE FUNCTION count_write()"
        )
    r.create_batch([NewExecution("t", "1", NOW - timedelta(seconds=1), None, None)])
    (candidate,) = r.get_due(NOW, 10)
    if write == "remove":
        with engine.begin() as conn:  # a claim, as the strict delete expects (the trigger counts it)
            conn.exec_driver_sql("UPDATE scheduled_tasks SET picked = true, version = 2")
        target = candidate.with_changes(picked=True, version=2)
    else:
        target = candidate
    outcome: list[object] = []
    rival_error: list[Exception] = []

    def engine_write() -> None:
        try:
            outcome.append(r.remove(target) if write == "remove" else r.pick(target, NOW))
        except Exception as exc:
            outcome.append(exc)

    # Lock waits are read from pg_locks, which is live; pg_stat_activity would keep showing the
    # first poll's snapshot for the rest of the watcher's transaction.
    holds_up = sa.text(
        "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted AND :s = ANY(pg_blocking_pids(pid))"
    )
    is_held_up = sa.text("SELECT cardinality(pg_blocking_pids(:s)) > 0")

    with engine.connect() as rival, engine.connect() as gate, engine.connect() as watcher:
        rival_session = session_id(rival)
        rival.exec_driver_sql("SET LOCAL deadlock_timeout = '10s'")
        rival.exec_driver_sql("UPDATE counter SET n = n + 1 WHERE id = 2")
        gate_session = session_id(gate)
        gate.exec_driver_sql("UPDATE counter SET n = n + 1 WHERE id = 1")

        def rival_waits_for_the_execution() -> None:
            try:
                rival.exec_driver_sql(
                    "UPDATE scheduled_tasks SET last_heartbeat = now() WHERE task_instance = '1'"
                )
                rival.commit()
            except Exception as exc:
                rival_error.append(exc)
                rival.rollback()

        worker = threading.Thread(target=engine_write)
        contender = threading.Thread(target=rival_waits_for_the_execution)
        try:
            worker.start()
            wait_until(
                lambda: watcher.execute(holds_up, {"s": gate_session}).scalar_one(),
                timeout=10,
                message="the engine's write holds the execution's row and waits at the gate",
            )
            contender.start()
            wait_until(
                lambda: watcher.execute(is_held_up, {"s": rival_session}).scalar_one(),
                timeout=10,
                message="the rival waits for the execution's row",
            )
        finally:
            gate.rollback()
            if contender.ident is None:
                rival.rollback()
            else:
                contender.join(30)
            worker.join(30)
    assert rival_error == [], "the rival, not the engine's write, was chosen as the victim"
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    stored = r.get_execution("t", "1")
    if write == "remove":
        assert stored is None
    else:
        assert stored is not None and (stored.picked, stored.version) == (True, 2)


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_a_batched_removal_in_flight_leaves_other_due_rows_claimable(engine):
    """A completion batch deleting some rows must not hold the others: a lock-and-fetch claim
    running while the delete's transaction is open (``SKIP LOCKED``) would pass over them, due
    and unclaimed. The claim runs from the delete's own statement event, inside that window."""
    r = repo(engine)
    r.create_batch([new(id=str(i), at=NOW + timedelta(seconds=i)) for i in range(5)])
    finished = r.lock_and_fetch(NOW + timedelta(minutes=1), 3)
    assert sorted(e.instance_id for e in finished) == ["0", "1", "2"]
    claimed_meanwhile: list[str] = []

    def claim_during_the_delete(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("DELETE") and not claimed_meanwhile:
            other = repo(engine, name="node-2")
            claimed_meanwhile.extend(
                e.instance_id for e in other.lock_and_fetch(NOW + timedelta(minutes=1), 10)
            )
            claimed_meanwhile.append("(claimed)")

    sa.event.listen(engine, "after_cursor_execute", claim_during_the_delete)
    try:
        assert r.remove_many(finished) == {("one", "0"), ("one", "1"), ("one", "2")}
    finally:
        sa.event.remove(engine, "after_cursor_execute", claim_during_the_delete)
    assert claimed_meanwhile == ["3", "4", "(claimed)"], (
        "the rows the removal does not delete stayed claimable while it ran"
    )


@pytest.mark.dialects("mariadb", "mysql")
def test_a_one_row_lock_and_fetch_claim_updates_by_key_not_by_scanning_the_table(engine):
    """The claim's UPDATE of its selected keys seeks the primary key for one row, as for many:
    a plan that scans the table costs every claim a walk over every row."""
    r = repo(engine)
    r.create_batch([new(id=str(i), at=NOW + timedelta(days=1, seconds=i)) for i in range(300)])
    r.create_if_not_exists(new(id="due", at=NOW))
    updates: list[tuple[str, dict]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE"):
            updates.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        [claimed] = r.lock_and_fetch(NOW, 10)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert claimed.instance_id == "due"
    [(statement, parameters)] = updates
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).mappings().all()
    assert [(row["type"], row["key"]) for row in plan] in ([("range", "PRIMARY")], [("const", "PRIMARY")]), (
        plan
    )
