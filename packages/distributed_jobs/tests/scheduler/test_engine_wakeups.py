"""Wake-ups: PostgreSQL NOTIFY hints, local due-time timers, and hints deferred to the commit."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    Scheduler,
    SchedulerClient,
    SchedulerEventType,
    Tasks,
    create_table,
)
from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._polling.waiter import Waiter
from ekbatan.distributed_jobs.scheduler._polling.wakeups import (
    MAX_PAYLOAD_BYTES,
    NotificationListener,
    Wakeup,
    channel_for,
    decode,
    decode_due,
    encode_due,
    encode_scheduled,
)
from testsupport import EventRecorder, create_isolated_database, wait_until

TASK = Tasks.one_time("t").execute(lambda instance, ctx: None)
# A poller that polls every minute and a test that waits a third of that for what a wake-up
# starts: only the wake-up can explain it, and a loaded machine has time to spare.
MINUTE = timedelta(minutes=1)
INSIDE_THE_INTERVAL = MINUTE.total_seconds() / 3


def test_due_times_survive_the_notification_payload():
    instant = datetime(2026, 11, 30, 4, 20, 1, 123456, tzinfo=UTC)
    assert decode_due(encode_due(instant)) == instant  # to the microsecond: no early wake-up
    assert decode_due(encode_due(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))) == datetime(
        1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC
    )
    assert decode_due("not a number") is None
    assert decode_due("9" * 30) is None  # out of range: ignored, polling still finds the row


@pytest.mark.parametrize(
    ("name", "instance"),
    [("t", "1"), ("a:b", "c:d"), ("", "x"), ("t", ""), ("ñame 🙂", "inst\nance"), ("12", "34")],
)
def test_a_scheduled_execution_s_key_survives_the_payload(name, instance):
    instant = datetime(2026, 11, 30, 10, 0, 0, 654321, tzinfo=UTC)
    assert decode(encode_scheduled(instant, name, instance)) == Wakeup(
        instant, TaskInstanceId(name, instance)
    )


def test_payloads_without_a_usable_key_still_carry_the_due_time():
    instant = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    assert decode(encode_due(instant)) == Wakeup(instant)  # batches and reschedules
    long = encode_scheduled(instant, "t", "i" * MAX_PAYLOAD_BYTES)
    assert long == encode_due(instant), "a payload PostgreSQL would refuse falls back to the time"
    assert decode(f"{encode_due(instant)}:99:short") == Wakeup(instant)  # length beyond the text
    assert decode(f"{encode_due(instant)}:x:t1") == Wakeup(instant)
    assert decode(f"{encode_due(instant)}:²:t1") == Wakeup(instant)  # a digit, but not for int()
    assert decode("garbage:1:t1") is None


@pytest.mark.dialects("postgres")
def test_channel_names_differ_per_schema(dialect):
    first, second = create_isolated_database(dialect), create_isolated_database(dialect)
    try:
        names = []
        for db in (first, second):
            with db.engine().connect() as conn:
                names.append(conn.execute(sa.text(f"SELECT {channel_for('scheduled_tasks')}")).scalar())
        assert names[0] != names[1]
        assert names[0] == f"ekbatan_{first.name}_scheduled_tasks"
    finally:
        first.drop()
        second.drop()
    assert channel_for("jobs.scheduled_tasks") == "'ekbatan_jobs_scheduled_tasks'"


@pytest.mark.dialects("postgres")
def test_a_listener_hears_committed_schedules_only(engine):
    heard: list[Wakeup] = []
    listener = NotificationListener(
        engine, channel_for("scheduled_tasks"), lambda wakeup, _connection: heard.append(wakeup)
    )
    listener.start()
    try:
        wait_until(listener.listening.is_set, timeout=10, message="listener connected")
        client = SchedulerClient(engine, [TASK])
        at = datetime(2030, 1, 1, tzinfo=UTC)
        with engine.connect() as conn, conn.begin() as tx:
            client.schedule(TASK.instance("rolled-back"), at - timedelta(days=1), connection=conn)
            tx.rollback()
        client.schedule(TASK.instance("committed"), at)
        wait_until(lambda: heard, timeout=10, message="a notification")
        assert heard == [Wakeup(at, TaskInstanceId("t", "committed"))], (
            "the rolled-back schedule must not be announced"
        )
    finally:
        listener.stop()


def test_waiter_wake_by_before_waiting_shortens_the_next_wait():
    waiter = Waiter()
    waiter.wake_by(0.05)
    thread = threading.Thread(target=waiter.wait, args=(MINUTE.total_seconds(),), daemon=True)
    thread.start()
    thread.join(INSIDE_THE_INTERVAL)
    assert not thread.is_alive(), "the minute's wait should have ended at the hint"


def test_waiter_wake_by_during_a_wait_pulls_its_deadline_forward():
    waiter = Waiter()
    done = threading.Event()

    def sleeper():
        waiter.wait(MINUTE.total_seconds())
        done.set()

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    wait_until(lambda: waiter._waiting, timeout=5)
    waiter.wake_by(0.05)
    assert done.wait(INSIDE_THE_INTERVAL), "the minute's wait should have ended at the hint"
    thread.join()


def test_transactional_schedule_wakes_the_poller_only_after_commit(engine):
    """Polling every minute: only the commit-time hint can make the task run well before then."""
    ran = threading.Event()
    task = Tasks.one_time("t").execute(lambda instance, ctx: ran.set())
    recorder = EventRecorder()
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(MINUTE)
        .listen_for_notifications(False)
        .add_listener(recorder)
        .build()
    )
    with scheduler:
        with engine.connect() as conn, conn.begin() as tx:
            scheduler.schedule(task.instance("undone"), connection=conn)
            tx.rollback()
        assert recorder.scheduled == [], "a rolled-back schedule is not reported"
        with engine.begin() as conn:
            scheduler.schedule(task.instance("kept"), connection=conn)
            assert recorder.scheduled == [], "reported at commit, not before"
        assert [key.id for key, _ in recorder.scheduled] == ["kept"]
        assert ran.wait(INSIDE_THE_INTERVAL), (
            "the commit-time hint should start the task long before the next poll"
        )


@pytest.mark.dialects("postgres")
def test_a_task_scheduled_by_another_process_starts_without_waiting_for_a_poll(engine, database):
    ran = threading.Event()
    task = Tasks.one_time("t").execute(lambda instance, ctx: ran.set())
    scheduler = Scheduler.create(engine, task).polling_interval(MINUTE).build()
    with scheduler:
        wait_until(lambda: scheduler._listener.listening.is_set(), timeout=10, message="listening")
        elsewhere = sa.create_engine(database.url)
        try:
            SchedulerClient(elsewhere, [task]).schedule(task.instance("1"))
        finally:
            elsewhere.dispose()
        assert ran.wait(INSIDE_THE_INTERVAL), (
            "the notification should start the task long before the next poll"
        )


def _claimed_ahead_but_never_started_early(engine, strategy: str) -> None:
    """The poller wakes CLAIM_LEAD before a due time it knows of and claims then; the handler
    still starts only at the due time."""
    started: dict[str, datetime] = {}
    asked: dict[str, datetime] = {}
    task = Tasks.one_time("t").execute(
        lambda instance, ctx: started.setdefault(instance.id, datetime.now(UTC))
    )
    builder = Scheduler.create(engine, task).polling_interval(MINUTE)
    builder = (
        builder.poll_using_lock_and_fetch() if strategy == "lock_and_fetch" else builder.poll_using_fetch()
    )
    with builder.build() as scheduler:
        # due times with a sub-millisecond part: SQLite stores milliseconds, truncating them
        # (only the sub-millisecond part is replaced: the due times stay 300 ms ahead)
        ahead = datetime.now(UTC) + timedelta(milliseconds=300)
        base = ahead.replace(microsecond=ahead.microsecond // 1000 * 1000 + 999)
        for i in range(5):
            asked[str(i)] = base + timedelta(milliseconds=60 * i)
            scheduler.schedule(task.instance(str(i)), asked[str(i)])
        wait_until(
            lambda: len(started) == 5, timeout=INSIDE_THE_INTERVAL, message="all five ran at their times"
        )
    for instance_id, at in started.items():
        due = asked[instance_id]
        assert at >= due, (
            f"{instance_id} started {(due - at).total_seconds() * 1000:.2f} ms before its due time"
        )
        assert at - due < timedelta(seconds=INSIDE_THE_INTERVAL), (
            f"{instance_id} waited for a poll, not its timer"
        )


def test_fetch_claims_a_known_due_time_ahead_but_never_starts_it_early(engine):
    _claimed_ahead_but_never_started_early(engine, "fetch")


@pytest.mark.dialects("postgres", "mariadb")
def test_lock_and_fetch_claims_a_known_due_time_ahead_but_never_starts_it_early(engine):
    _claimed_ahead_but_never_started_early(engine, "lock_and_fetch")


def test_create_table_is_idempotent(database):
    engine = database.engine()
    assert create_table(engine) is True
    assert create_table(engine) is False


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_a_due_row_a_lock_and_fetch_claim_passed_over_is_claimed_once_its_lock_is_released(engine):
    """``SKIP LOCKED`` passes over a due row another transaction holds; the poller must come back
    for it soon, not a polling interval later. The row is held, deterministically, across a poll
    the test waits for; released, it must run long before the minute's poll."""
    ran = threading.Event()
    task = Tasks.one_time("t").execute(lambda instance, ctx: ran.set())
    recorder = EventRecorder()
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(MINUTE)
        .poll_using_lock_and_fetch()
        .listen_for_notifications(False)
        .add_listener(recorder)
        .build()
    )
    polls = lambda: recorder.count(SchedulerEventType.RAN_EXECUTE_DUE)  # noqa: E731
    with scheduler:
        wait_until(lambda: polls() >= 1, timeout=10, message="the first poll")
        # Scheduled behind the scheduler's back (its own client would wake it), due already.
        SchedulerClient(engine, [task], notify=False).schedule(
            task.instance("held"), datetime.now(UTC) - timedelta(seconds=1)
        )
        holder = engine.connect()
        try:
            holder.execute(
                sa.text("SELECT task_instance FROM scheduled_tasks WHERE task_instance = 'held' FOR UPDATE")
            ).all()
            before = polls()
            scheduler.trigger_check_for_due_executions()
            wait_until(lambda: polls() > before, timeout=10, message="a poll while the row is held")
            assert not ran.is_set(), "the held row cannot have been claimed"
        finally:
            holder.rollback()
            holder.close()
        assert ran.wait(INSIDE_THE_INTERVAL), "the passed-over row should run soon after its lock went"
