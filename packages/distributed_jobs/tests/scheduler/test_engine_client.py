"""SchedulerClient: schedule, reschedule, cancel and list, standalone and on the scheduler, on
every dialect — including scheduling inside the caller's own transaction."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from ekbatan.distributed_jobs.scheduler import (
    FailedToScheduleBatchError,
    JsonSerializer,
    ScheduledExecutionsFilter,
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    SettableClock,
    TaskInstance,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceId,
    TaskInstanceNotFoundError,
    Tasks,
    WhenExists,
)
from testsupport import EventRecorder, wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def noop(instance, ctx) -> None:
    return None


TASK_A = Tasks.one_time("task-a").execute(noop)
TASK_B = Tasks.one_time("task-b").execute(noop)


@pytest.fixture
def client(engine: sa.Engine, clock: SettableClock) -> SchedulerClient:
    return SchedulerClient(engine, [TASK_A, TASK_B], clock=clock)


def keys(executions) -> list[tuple[str, str]]:
    return [(e.task_name, e.instance_id) for e in executions]


def pick(client: SchedulerClient, key: tuple[str, str]) -> None:
    """Claim a row as a scheduler would (it is then "currently executing")."""
    execution = client.get_scheduled_execution(key).execution
    assert client.repository.pick(execution, client.clock.now()) is not None


# --------------------------------------------------------------------------- scheduling
def test_standalone_client_schedules_and_a_duplicate_returns_false(client, manual, clock, dialect):
    assert client.schedule(TASK_A.instance("1", {"n": 1}), T0 + HOUR) is True
    assert client.schedule(TASK_A.instance("1", {"n": 2}), T0 + 2 * HOUR) is False
    assert client.schedule_if_not_exists(TASK_A.instance("1", {"n": 3}), T0) is False
    assert client.schedule_if_not_exists(TASK_A.instance("2"), T0) is True

    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data, row.is_picked, row.picked_by) == (T0 + HOUR, {"n": 1}, False, None)
    assert (row.execution.version, row.consecutive_failures, row.last_success, row.last_failure) == (
        1,
        0,
        None,
        None,
    )

    seen: list[tuple[str, object]] = []
    task = Tasks.one_time("task-a").execute(lambda instance, ctx: seen.append((instance.id, instance.data)))
    scheduler = manual(task)
    clock.set(T0 + HOUR)
    assert scheduler.run_any_due_executions() == 2
    assert sorted(seen, key=lambda s: s[0]) == [("1", {"n": 1}), ("2", None)]


def test_create_builds_a_client_for_the_given_tasks(engine, clock, dialect):
    client = SchedulerClient.create(engine, TASK_A, clock=clock)
    client.schedule(TASK_A.instance("1", [1, 2]))
    assert client.get_scheduled_execution(("task-a", "1")).data == [1, 2]
    assert client.get_scheduled_execution(("task-a", "1")).execution_time == T0


def test_schedule_batch(client, dialect):
    generated = (TASK_A.instance(str(i), {"i": i}) for i in (1, 2))
    assert client.schedule_batch(generated, T0 + HOUR) == 2
    assert (
        client.schedule_batch([(TASK_B.instance("x"), T0 + 2 * HOUR), TASK_B.schedulable_instance("y")]) == 2
    )
    assert client.schedule_batch([TASK_B.instance(str(i)) for i in range(5)], T0, chunk_size=2) == 5
    assert client.schedule_batch([]) == 0

    rows = {(e.task_name, e.instance_id): e for e in client.get_scheduled_executions()}
    assert len(rows) == 9
    assert (rows[("task-a", "1")].execution_time, rows[("task-a", "1")].data) == (T0 + HOUR, {"i": 1})
    assert rows[("task-b", "x")].execution_time == T0 + 2 * HOUR
    assert rows[("task-b", "y")].execution_time == T0  # a schedulable instance's rule: now


def test_schedule_batch_with_an_existing_key_schedules_none_of_it(client, dialect):
    client.schedule(TASK_A.instance("2"), T0)
    batch = [TASK_A.instance("1"), TASK_A.instance("2"), TASK_A.instance("3")]
    with pytest.raises(FailedToScheduleBatchError, match="batch of 3"):
        client.schedule_batch(batch, T0)
    assert keys(client.get_scheduled_executions()) == [("task-a", "2")]
    with pytest.raises(ValueError, match="chunk_size"):
        client.schedule_batch(batch, T0, chunk_size=0)


def test_when_exists_reschedule_overwrites_time_and_data(client, dialect):
    client.schedule(TASK_A.instance("1", {"v": "original"}), T0 + HOUR)
    moved = client.schedule(
        TASK_A.instance("1", {"v": "new"}), T0 + 3 * HOUR, when_exists=WhenExists.RESCHEDULE
    )
    assert moved is True, "an existing execution that was rescheduled reports True"
    assert client.schedule(TASK_A.instance("1"), T0, when_exists=WhenExists.DO_NOTHING) is False
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data, row.execution.version) == (T0 + 3 * HOUR, {"v": "new"}, 2)

    client.schedule(TASK_A.instance("1"), T0 + 4 * HOUR, when_exists="reschedule")  # no data: kept
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data) == (T0 + 4 * HOUR, {"v": "new"})
    assert client.schedule(TASK_A.instance("2"), T0, when_exists=WhenExists.RESCHEDULE) is True


def test_when_exists_do_nothing_keeps_the_original(client, dialect):
    client.schedule(TASK_A.instance("1", {"v": "original"}), T0 + HOUR)
    for policy in (WhenExists.DO_NOTHING, "do_nothing"):
        assert client.schedule(TASK_A.instance("1", {"v": "new"}), T0, when_exists=policy) is False
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data, row.execution.version) == (T0 + HOUR, {"v": "original"}, 1)
    with pytest.raises(ValueError, match="sometimes"):
        client.schedule(TASK_A.instance("1"), T0, when_exists="sometimes")


def test_when_exists_reschedule_of_a_picked_row_is_an_error(client, dialect):
    client.schedule(TASK_A.instance("1"), T0)
    pick(client, ("task-a", "1"))
    with pytest.raises(TaskInstanceCurrentlyExecutingError):
        client.schedule(TASK_A.instance("1"), T0 + HOUR, when_exists=WhenExists.RESCHEDULE)


def test_a_handler_schedules_another_task_through_its_context(manual, clock, dialect):
    ran: list[str] = []
    follow_up = Tasks.one_time("follow-up").execute(lambda instance, ctx: ran.append(instance.data["from"]))

    def first(instance, ctx):
        ctx.scheduler_client.schedule(follow_up.instance(f"after-{instance.id}", {"from": instance.id}))

    starter = Tasks.one_time("starter").execute(first)
    scheduler = manual(starter, follow_up)
    scheduler.schedule(starter.instance("s1"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert keys(scheduler.get_scheduled_executions()) == [("follow-up", "after-s1")]
    assert scheduler.run_any_due_executions() == 1
    assert ran == ["s1"]
    assert scheduler.get_scheduled_executions() == []


def test_scheduling_through_the_scheduler_notifies_listeners_and_the_client_does_not(
    manual, engine, clock, dialect
):
    recorder = EventRecorder()
    scheduler = manual(TASK_A, recorder=recorder)
    scheduler.schedule(TASK_A.instance("1"), T0 + HOUR)
    scheduler.reschedule(("task-a", "1"), T0 + 2 * HOUR)
    scheduler.schedule_batch([TASK_A.instance("2")], T0)
    SchedulerClient(engine, [TASK_A], clock=clock).schedule(TASK_A.instance("3"), T0)
    assert recorder.scheduled == [
        (TaskInstanceId("task-a", "1"), T0 + HOUR),
        (TaskInstanceId("task-a", "1"), T0 + 2 * HOUR),
        (TaskInstanceId("task-a", "2"), T0),
    ]


# --------------------------------------------------------------------------- reading
def test_counts_per_task(client, dialect):
    for i in range(2):
        client.schedule(TASK_A.instance(f"a{i}"), T0 + i * HOUR)
    for i in range(3):
        client.schedule(TASK_B.instance(f"b{i}"), T0 + i * HOUR)
    assert len(client.get_scheduled_executions()) == 5
    assert keys(client.get_scheduled_executions_for_task("task-a")) == [("task-a", "a0"), ("task-a", "a1")]
    assert len(client.get_scheduled_executions_for_task("task-b")) == 3
    assert client.get_scheduled_executions_for_task("task-c") == []

    pick(client, ("task-b", "b0"))  # picked rows are left out by default
    assert len(client.get_scheduled_executions()) == 4
    assert len(client.get_scheduled_executions(ScheduledExecutionsFilter.all())) == 5
    assert len(client.get_scheduled_executions_for_task("task-b")) == 2
    summary = {s.task_name: s for s in client.get_scheduled_executions_summary_by_task()}
    assert {n: (s.instance_count, s.running_count, s.scheduled_count) for n, s in summary.items()} == {
        "task-a": (2, 0, 2),
        "task-b": (3, 1, 2),
    }
    assert summary["task-b"].earliest_execution_time == T0
    assert summary["task-b"].due_count is None  # not asked
    # due at T0 + 1 h: a0, a1, b1 (b0 is picked, b2 later); in the same one read
    due = client.get_scheduled_executions_summary_by_task(due_at=T0 + HOUR)
    assert {s.task_name: s.due_count for s in due} == {"task-a": 2, "task-b": 1}


def test_single_lookup_present_and_absent(client, dialect):
    client.schedule(TASK_A.instance("1", "data"), T0)
    for key in (("task-a", "1"), TaskInstanceId("task-a", "1"), TASK_A.instance("1")):
        found = client.get_scheduled_execution(key)
        assert (found.task_name, found.instance_id, found.data) == ("task-a", "1", "data")
    assert client.get_scheduled_execution(("task-a", "2")) is None
    assert client.get_scheduled_execution(("task-b", "1")) is None
    with pytest.raises(TypeError, match="task_name, instance_id"):
        client.get_scheduled_execution("task-a/1")


@pytest.mark.dialects("postgres", "mariadb")
def test_a_fresh_client_on_a_pool_of_one_connection_reads_and_schedules(engine, database, clock):
    # Its first statements look the table's columns up first; that must not need a second
    # connection while the first is held (a pool of one would wait for itself for ever).
    one = database.engine(pool_size=1, max_overflow=0, pool_timeout=5)
    assert SchedulerClient(one, [TASK_A], clock=clock).get_scheduled_execution(("task-a", "1")) is None
    fresh = SchedulerClient(one, [TASK_A], clock=clock)
    assert fresh.schedule_if_not_exists(TASK_A.instance("1"), T0) is True
    assert fresh.get_scheduled_execution(("task-a", "1")).execution_time == T0


def test_client_with_no_known_tasks_returns_raw_bytes(client, engine, clock, dialect):
    payload = {"to": "ada@example.org", "n": [1, 2]}
    client.schedule(TASK_A.instance("1", payload), T0)
    blind = SchedulerClient(engine, clock=clock)
    found = blind.get_scheduled_execution(("task-a", "1"))
    assert found.has_raw_data
    assert isinstance(found.data, bytes) and found.data == found.raw_data
    assert json.loads(found.data) == payload
    assert JsonSerializer().deserialize(None, found.data) == payload
    [listed] = blind.get_scheduled_executions()
    assert listed.has_raw_data and json.loads(listed.data) == payload
    assert not client.get_scheduled_execution(("task-a", "1")).has_raw_data


# --------------------------------------------------------------------------- reschedule and cancel
def test_reschedule_keeps_data_unless_new_data_is_given(client, dialect):
    client.schedule(TASK_A.instance("1", {"v": 1}), T0 + HOUR)
    assert client.reschedule(("task-a", "1"), T0 + 2 * HOUR) is True
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data, row.execution.version) == (T0 + 2 * HOUR, {"v": 1}, 2)

    client.reschedule(TaskInstanceId("task-a", "1"), T0 + 3 * HOUR, {"v": 2})
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.data, row.execution.version) == (T0 + 3 * HOUR, {"v": 2}, 3)

    client.reschedule(("task-a", "1"), T0 + 3 * HOUR, None)  # explicit None clears the data
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.data, row.raw_data) == (
        None,
        b"null",
    )  # JSON null, as db-scheduler's JSON serializers write it


def test_reschedule_resets_failure_bookkeeping(client, manual, clock, dialect):
    failing = Tasks.one_time("task-a").execute(lambda instance, ctx: 1 / 0)
    scheduler = manual(failing)
    scheduler.schedule(failing.instance("1"), T0)
    assert scheduler.run_any_due_executions() == 1
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.consecutive_failures, row.last_failure) == (1, T0)

    client.reschedule(("task-a", "1"), T0 + HOUR)
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.consecutive_failures, row.last_failure, row.last_success) == (0, None, None)


def test_cancel_and_reschedule_of_a_missing_execution_raise_not_found(client, dialect):
    with pytest.raises(TaskInstanceNotFoundError, match="task-a/nope") as cancelled:
        client.cancel(("task-a", "nope"))
    assert (cancelled.value.task_name, cancelled.value.instance_id) == ("task-a", "nope")
    with pytest.raises(TaskInstanceNotFoundError, match="task-a/nope"):
        client.reschedule(("task-a", "nope"), T0)
    assert client.get_scheduled_executions() == []


def test_cancel_and_reschedule_of_a_picked_execution_raise_currently_executing(client, dialect):
    client.schedule(TASK_A.instance("1", "data"), T0)
    pick(client, ("task-a", "1"))
    with pytest.raises(TaskInstanceCurrentlyExecutingError, match="task-a/1 is currently picked") as error:
        client.cancel(("task-a", "1"))
    assert (error.value.task_name, error.value.instance_id) == ("task-a", "1")
    with pytest.raises(TaskInstanceCurrentlyExecutingError):
        client.reschedule(("task-a", "1"), T0 + HOUR, "other")
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.is_picked, row.execution_time, row.data, row.execution.version) == (True, T0, "data", 2)


def test_cancel_deletes_the_row(client, dialect):
    client.schedule(TASK_A.instance("1"), T0)
    client.schedule(TASK_A.instance("2"), T0)
    client.cancel(TASK_A.instance("1"))
    assert keys(client.get_scheduled_executions()) == [("task-a", "2")]


# --------------------------------------------------------------------------- times
def test_relative_times_count_from_the_clock(client, clock, dialect):
    client.schedule(TASK_A.instance("1"), timedelta(minutes=5))
    client.schedule(TASK_A.instance("2"))  # no time: now
    client.schedule_batch(
        [TASK_B.instance("1"), (TASK_B.instance("2"), timedelta(hours=2))], timedelta(seconds=30)
    )
    clock.advance(timedelta(minutes=1))
    client.reschedule(("task-a", "2"), timedelta(hours=1))
    times = {(e.task_name, e.instance_id): e.execution_time for e in client.get_scheduled_executions()}
    assert times == {
        ("task-a", "1"): T0 + timedelta(minutes=5),
        ("task-a", "2"): T0 + timedelta(minutes=61),
        ("task-b", "1"): T0 + timedelta(seconds=30),
        ("task-b", "2"): T0 + timedelta(hours=2),
    }


def test_aware_times_in_any_zone_are_stored_as_the_same_instant(client, dialect):
    tehran = timezone(timedelta(hours=3, minutes=30))
    client.schedule(TASK_A.instance("1"), datetime(2024, 1, 1, 15, 30, tzinfo=tehran))
    stored = client.get_scheduled_execution(("task-a", "1")).execution_time
    assert stored == T0 and stored.utcoffset() == timedelta(0)


def test_naive_datetime_is_rejected_with_a_clear_error(client, dialect):
    naive = datetime(2024, 1, 1, 12, 0)
    with pytest.raises(ValueError, match=r"naive datetime 2024-01-01T12:00:00 has no time zone"):
        client.schedule(TASK_A.instance("1"), naive)
    with pytest.raises(ValueError, match="naive"):
        client.schedule_batch([TASK_A.instance("1")], naive)
    assert client.get_scheduled_executions() == []

    client.schedule(TASK_A.instance("1"), T0)
    with pytest.raises(ValueError, match="naive"):
        client.reschedule(("task-a", "1"), naive)
    with pytest.raises(TypeError, match="aware datetime or a timedelta"):
        client.schedule(TASK_A.instance("2"), 1_700_000_000)
    row = client.get_scheduled_execution(("task-a", "1"))
    assert (row.execution_time, row.execution.version) == (T0, 1)


# --------------------------------------------------------------------------- caller's transaction
@pytest.fixture
def orders(engine: sa.Engine) -> sa.Table:
    """A business table written in the same transaction as the scheduling."""
    table = sa.Table(
        "orders",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("note", sa.String(50)),
    )
    table.create(engine)
    return table


def order_ids(engine: sa.Engine, orders: sa.Table) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(orders.c.id).order_by(orders.c.id)).scalars())


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_scheduling_inside_a_connection_transaction(client, engine, orders, dialect, outcome):
    with engine.connect() as conn:
        conn.begin()
        conn.execute(orders.insert().values(id=1, note="placed"))
        assert client.schedule(TASK_A.instance("order-1", {"order": 1}), T0, connection=conn) is True
        client.schedule_batch([TASK_B.instance("1"), TASK_B.instance("2")], T0, connection=conn)
        # visible inside the transaction, not outside it
        assert client.get_scheduled_execution(("task-a", "order-1"), connection=conn) is not None
        assert len(client.get_scheduled_executions(connection=conn)) == 3
        assert client.get_scheduled_execution(("task-a", "order-1")) is None
        getattr(conn, outcome)()

    if outcome == "commit":
        assert order_ids(engine, orders) == [1]
        assert sorted(keys(client.get_scheduled_executions())) == [
            ("task-a", "order-1"),
            ("task-b", "1"),
            ("task-b", "2"),
        ]
    else:
        assert order_ids(engine, orders) == []
        assert client.get_scheduled_executions() == []


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_scheduling_inside_an_orm_session(client, engine, orders, manual, dialect, outcome):
    ran: list[str] = []
    task = Tasks.one_time("task-a").execute(lambda instance, ctx: ran.append(instance.id))
    with Session(engine) as session:
        session.execute(orders.insert().values(id=7, note="placed"))
        assert client.schedule(TASK_A.instance("order-7"), T0, connection=session) is True
        assert client.get_scheduled_execution(("task-a", "order-7"), connection=session) is not None
        getattr(session, outcome)()

    scheduler = manual(task)
    if outcome == "commit":
        assert order_ids(engine, orders) == [7]
        assert scheduler.run_any_due_executions() == 1
        assert ran == ["order-7"]
    else:
        assert order_ids(engine, orders) == []
        assert client.get_scheduled_executions() == []
        assert scheduler.run_any_due_executions() == 0


def test_reschedule_and_cancel_in_a_rolled_back_transaction_change_nothing(client, engine, dialect):
    client.schedule(TASK_A.instance("1", "kept"), T0 + HOUR)
    client.schedule(TASK_A.instance("2"), T0 + HOUR)
    with engine.connect() as conn:
        conn.begin()
        client.reschedule(("task-a", "1"), T0 + 5 * HOUR, "changed", connection=conn)
        client.cancel(("task-a", "2"), connection=conn)
        assert client.get_scheduled_execution(("task-a", "2"), connection=conn) is None
        conn.rollback()
    rows = {e.instance_id: e for e in client.get_scheduled_executions()}
    assert set(rows) == {"1", "2"}
    assert (rows["1"].execution_time, rows["1"].data, rows["1"].execution.version) == (T0 + HOUR, "kept", 1)


def test_duplicate_inside_a_transaction_returns_false_and_keeps_it_usable(client, engine, orders, dialect):
    client.schedule(TASK_A.instance("1"), T0)
    with engine.connect() as conn:
        conn.begin()
        assert client.schedule(TASK_A.instance("1"), T0 + HOUR, connection=conn) is False
        conn.execute(orders.insert().values(id=1, note="after the duplicate"))
        assert client.schedule(TaskInstance("task-a", "2"), T0, connection=conn) is True
        conn.commit()
    assert order_ids(engine, orders) == [1]
    assert keys(client.get_scheduled_executions()) == [("task-a", "1"), ("task-a", "2")]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_running_scheduler_learns_of_a_transactional_schedule_at_commit(engine, built, dialect, outcome):
    recorder = EventRecorder()
    task = Tasks.one_time("in-tx").execute(noop)
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(minutes=1))
        .scheduler_name("tx")
        .add_listener(recorder)
        .build()
    )
    built.append(scheduler)
    with scheduler:
        wait_until(lambda: recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) >= 1, 5, message="first poll")
        with engine.connect() as conn:
            conn.begin()
            scheduler.schedule(task.instance("1"), connection=conn)  # due now
            assert recorder.scheduled == []  # nothing to tell anyone before the commit
            getattr(conn, outcome)()
        if outcome == "commit":
            # a third of the polling interval: only the commit-time hint explains a run this early
            wait_until(
                lambda: recorder.completed, 20, message="execution after the commit, before the next poll"
            )
            assert [key for key, _ in recorder.scheduled] == [TaskInstanceId("in-tx", "1")]
        else:
            assert recorder.scheduled == []
            assert scheduler.get_scheduled_executions() == []
    assert [c.execution.instance_id for c in recorder.successes()] == (["1"] if outcome == "commit" else [])


def test_a_commit_slower_than_the_wake_up_hint_still_runs_promptly(engine, built, dialect):
    """The hint is given from inside the commit, before it lands; a commit that takes longer
    than the hint's head start must not leave the execution waiting for the next poll."""
    recorder = EventRecorder()
    task = Tasks.one_time("slow-commit").execute(noop)
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(minutes=1))
        .scheduler_name("tx")
        .listen_for_notifications(False)
        .add_listener(recorder)
        .build()
    )
    built.append(scheduler)

    def slow_commit(conn) -> None:
        time.sleep(0.1)  # runs after the engine's own commit hook, before the database commits

    with scheduler:
        wait_until(lambda: recorder.count(SchedulerEventType.RAN_EXECUTE_DUE) >= 1, 5, message="first poll")
        with engine.connect() as conn:
            conn.begin()
            scheduler.schedule(task.instance("1"), connection=conn)
            sa.event.listen(engine, "commit", slow_commit)
            try:
                conn.commit()
            finally:
                sa.event.remove(engine, "commit", slow_commit)
        # a third of the polling interval: only a recheck after the hint explains a run this early
        wait_until(
            lambda: recorder.completed, 20, message="execution after a slow commit, before the next poll"
        )
