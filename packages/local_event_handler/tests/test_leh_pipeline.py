"""The pipeline driven one round at a time (no scheduler): fan-out, handling, retries, expiry."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from pipeline_support import OffsetClock, RecordingHandler, SettableClock, executor_for, registry_of

from ekbatan.core import ShardedUUID, ShardIdentifier
from ekbatan.core.outbox import UtcClock
from ekbatan.local_event_handler import (
    EventEnvelope,
    EventFanoutJob,
    EventHandler,
    EventHandlerRegistry,
    EventHandlingJob,
)
from testsupport import wait_until
from testsupport.sample_domain import (
    AuditEntry,
    GadgetCreateAction,
    GadgetCreated,
    NewGadget,
    NewNote,
    Note,
    NoteCreateAction,
    NoteCreated,
)

COLORS = ("red", "green", "blue")


def jobs(registry, handlers, *, clock=None, handling_clock=None, **handling_options):
    handler_registry = EventHandlerRegistry.builder().with_handlers(handlers).build()
    fanout = (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(clock or UtcClock())
        .wakeups(False)
        .build()
    )
    builder = (
        EventHandlingJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(handling_clock or clock or UtcClock())
        .wakeups(False)
    )
    for option, value in handling_options.items():
        getattr(builder, option)(value)
    handling = builder.build()
    return fanout, handling


def create_gadgets(executor, shards, count):
    ids = []
    for i in range(count):
        shard = shards[i % len(shards)].shard
        ids.append(executor.execute(GadgetCreateAction(), NewGadget(shard, f"gadget-{i}", COLORS[i % 3])))
    return ids


def total(shards, fn):
    return sum(fn(s) for s in shards)


def count_state(shards, state):
    return total(shards, lambda s: s.count_notifications(state))


def test_happy_path_one_notification_per_handler_then_all_succeed(shards):
    registry = registry_of(shards)
    email, indexer = RecordingHandler("email"), RecordingHandler("indexer")
    fanout, handling = jobs(registry, [email, indexer])
    try:
        ids = create_gadgets(executor_for(registry), shards, 3)
        assert total(shards, lambda s: len(s.events(delivered=False))) == 3
        assert all(len(s.events(delivered=False)) > 0 for s in shards)
        assert count_state(shards, "PENDING") == 0

        assert fanout.drain_one_round() is True
        assert total(shards, lambda s: len(s.events(delivered=False))) == 0
        assert total(shards, lambda s: len(s.events(delivered=True))) == 3
        assert count_state(shards, "PENDING") == 6
        assert all(s.count_notifications("PENDING") > 0 for s in shards)
        assert fanout.drain_one_round() is False

        assert handling.drain_one_round() is True
        assert count_state(shards, "SUCCEEDED") == 6
        assert count_state(shards, "PENDING") == 0
        assert (email.calls, indexer.calls) == (3, 3)
        for handler in (email, indexer):
            got = sorted((e.event.model_id, e.event.name, e.event.color) for e in handler.received)
            want = sorted((str(w), f"gadget-{i}", COLORS[i % 3]) for i, w in enumerate(ids))
            assert got == want
        envelope = email.received[0]
        assert isinstance(envelope.event, GadgetCreated)
        assert envelope.action_name == "GadgetCreateAction"
        assert envelope.namespace == "test.local_event_handler"
        assert envelope.model_type == "Gadget"
        assert envelope.event_date == envelope.completion_date >= envelope.started_date
        assert envelope.action_params["name"].startswith("gadget-")
        rows = [r for s in shards for r in s.notifications(handler_name="email")]
        assert all(r.attempts == 1 for r in rows)
        assert handling.drain_one_round() is False
    finally:
        fanout.close()
        handling.close()


def test_events_without_subscriber_stay_undelivered_until_a_handler_is_deployed(shards):
    registry = registry_of(shards)
    executor = executor_for(registry)
    for s in shards:
        executor.execute(GadgetCreateAction(), NewGadget(s.shard, "lonely", "grey"))
    other = RecordingHandler("notes-only", NoteCreated)
    fanout, _ = jobs(registry, [other])
    assert fanout.drain_one_round() is False
    assert total(shards, lambda s: len(s.events(delivered=False))) == len(shards)
    assert count_state(shards, None) == 0

    later, _ = jobs(registry, [RecordingHandler("email")])
    assert later.drain_one_round() is True
    assert total(shards, lambda s: len(s.events(delivered=False))) == 0
    assert count_state(shards, "PENDING") == len(shards)


def test_sentinel_rows_are_never_fanned_out(one_shard):
    registry = registry_of([one_shard])
    executor = executor_for(registry)
    executor.execute(lambda_action(), {})
    fanout, _ = jobs(registry, [RecordingHandler("email")])
    assert fanout.drain_one_round() is False
    assert one_shard.count_notifications() == 0


def lambda_action():
    from ekbatan.core import Action

    class NothingHappened(Action[Any, None]):
        def perform(self, principal, params):
            return None

    return NothingHappened()


def test_fanout_again_of_the_same_events_creates_no_duplicates(one_shard):
    """A replica that lags re-reads delivered events: the unique key absorbs the repeat."""
    registry = registry_of([one_shard])
    create_gadgets(executor_for(registry), [one_shard], 2)
    fanout, _ = jobs(registry, [RecordingHandler("email"), RecordingHandler("indexer")])
    assert fanout.drain_one_round()
    events = one_shard._tables().events
    one_shard.execute(sa.update(events).values(delivered=False))
    assert fanout.drain_one_round()
    assert one_shard.count_notifications() == 4
    assert len(one_shard.events(delivered=False)) == 0


def test_notifications_are_due_from_their_event_date(one_shard):
    registry = registry_of([one_shard])
    create_gadgets(executor_for(registry), [one_shard], 1)
    fanout, _ = jobs(registry, [RecordingHandler("email")], clock=OffsetClock(timedelta(hours=1)))
    fanout.drain_one_round()
    (row,) = one_shard.notifications()
    (event,) = one_shard.events()
    assert row.next_retry_at == event.event_date
    assert row.created_date > event.event_date + timedelta(minutes=59)
    assert (row.state, row.attempts, row.event_id, row.handler_name) == ("PENDING", 0, event.id, "email")
    assert row.payload == event.payload and row.action_params == event.action_params


def test_flaky_handler_is_retried_until_it_succeeds(one_shard):
    def fail_twice(envelope, call):
        if call <= 2:
            raise RuntimeError(f"flaky call {call}")

    registry = registry_of([one_shard])
    flaky = RecordingHandler("flaky", behaviour=fail_twice)
    fanout, handling = jobs(registry, [flaky], max_backoff_cap=timedelta(milliseconds=10))
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()

        def succeeded():
            handling.drain_one_round()
            return one_shard.count_notifications("SUCCEEDED") == 1

        wait_until(succeeded, timeout=5, interval=0.02, message="the flaky handler's notification succeeds")
        assert flaky.calls == 3
        (row,) = one_shard.notifications()
        assert (row.state, row.attempts) == ("SUCCEEDED", 3)
        assert one_shard.count_notifications("FAILED") == 0
    finally:
        handling.close()


def test_backoff_doubles_from_30_seconds_up_to_the_cap_on_a_stepped_clock(one_shard):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = SettableClock(start)
    registry = registry_of([one_shard])
    always = RecordingHandler("always", behaviour=lambda e, c: (_ for _ in ()).throw(ValueError("no")))
    fanout, handling = jobs(registry, [always], clock=clock, max_backoff_cap=timedelta(minutes=2))
    try:
        ActionClockExecutor(registry, clock).execute(
            GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red")
        )
        fanout.drain_one_round()
        waits = []
        for _ in range(5):
            assert handling.drain_one_round() is True
            (row,) = one_shard.notifications()
            assert row.state == "FAILED"
            waits.append(row.next_retry_at - clock.now())
            assert handling.drain_one_round() is False  # not due yet
            clock.advance(row.next_retry_at - clock.now())
        assert waits == [
            timedelta(seconds=30),
            timedelta(minutes=1),
            timedelta(minutes=2),
            timedelta(minutes=2),
            timedelta(minutes=2),
        ]
        assert one_shard.notifications()[0].attempts == 5
    finally:
        handling.close()


def ActionClockExecutor(registry, clock):
    from ekbatan.core import ActionExecutor

    return ActionExecutor(registry, namespace="test.local_event_handler", clock=clock)


def test_preflight_expiry_never_calls_the_handler(shards):
    registry = registry_of(shards)
    email = RecordingHandler("email")
    fanout, handling = jobs(
        registry,
        [email],
        handling_clock=OffsetClock(timedelta(seconds=60)),
        retention_window=timedelta(seconds=7),
    )
    try:
        create_gadgets(executor_for(registry), shards, 3)
        fanout.drain_one_round()
        assert count_state(shards, "PENDING") == 3
        assert handling.drain_one_round() is True
        assert count_state(shards, "EXPIRED") == 3
        assert sum(count_state(shards, s) for s in ("PENDING", "SUCCEEDED", "FAILED")) == 0
        assert email.calls == 0
        rows = [r for s in shards for r in s.notifications()]
        assert all(r.attempts == 0 for r in rows)
    finally:
        handling.close()


def test_always_failing_handler_expires_after_the_retention_window(shards, caplog):
    registry = registry_of(shards)
    always = RecordingHandler("always", behaviour=lambda e, c: (_ for _ in ()).throw(ValueError("broken")))
    fanout, handling = jobs(
        registry,
        [always],
        max_backoff_cap=timedelta(milliseconds=5),
        retention_window=timedelta(milliseconds=200),
    )
    try:
        create_gadgets(executor_for(registry), shards, 3)
        fanout.drain_one_round()

        def all_expired():
            handling.drain_one_round()
            return count_state(shards, "EXPIRED") == 3

        wait_until(all_expired, timeout=5, interval=0.01, message="every notification expires")
        assert sum(count_state(shards, s) for s in ("PENDING", "SUCCEEDED", "FAILED")) == 0
        calls = always.calls
        assert handling.drain_one_round() is False
        assert always.calls == calls
        discarded = [r for r in caplog.records if r.levelname == "ERROR" and "DISCARDED" in r.getMessage()]
        assert discarded and all("'always'" in r.getMessage() for r in discarded)
    finally:
        handling.close()


def test_a_fatal_error_in_one_handler_keeps_its_siblings_outcome(one_shard):
    class Fatal(BaseException):
        """Stands for errors outside Exception (e.g. a class that cannot be loaded)."""

    registry = registry_of([one_shard])

    def fatal(envelope, call):
        raise Fatal("class not found")

    broken, email = RecordingHandler("broken", behaviour=fatal), RecordingHandler("email")
    fanout, handling = jobs(registry, [broken, email])
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert (broken.calls, email.calls) == (1, 1)
        assert one_shard.count_notifications("SUCCEEDED") == 1
        assert one_shard.count_notifications("FAILED") == 1
        handling.drain_one_round()
        assert email.calls == 1
        assert one_shard.count_notifications("SUCCEEDED") == 1
    finally:
        handling.close()


def test_the_decision_uses_the_clock_after_the_handlers_returned(one_shard):
    clock = SettableClock(datetime(2026, 1, 1, tzinfo=UTC))
    registry = registry_of([one_shard])

    def slow_then_fail(envelope, call):
        clock.advance(timedelta(milliseconds=100))
        raise RuntimeError("failed after 100 ms")

    slow = RecordingHandler("slow", behaviour=slow_then_fail)
    fanout, handling = jobs(
        registry,
        [slow],
        clock=clock,
        max_backoff_cap=timedelta(milliseconds=5),
        retention_window=timedelta(milliseconds=50),
    )
    try:
        ActionClockExecutor(registry, clock).execute(
            GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red")
        )
        fanout.drain_one_round()
        handling.drain_one_round()
        assert slow.calls == 1
        (row,) = one_shard.notifications()
        assert (row.state, row.attempts) == ("EXPIRED", 1)
        assert row.updated_date == clock.now()
    finally:
        handling.close()


def test_a_renamed_handler_drains_rows_written_under_its_alias(one_shard):
    registry = registry_of([one_shard])
    create_gadgets(executor_for(registry), [one_shard], 2)
    old_fanout, _ = jobs(registry, [RecordingHandler("mailer")])
    old_fanout.drain_one_round()
    assert {r.handler_name for r in one_shard.notifications()} == {"mailer"}

    renamed = RecordingHandler("email", aliases=("mailer",))
    fanout, handling = jobs(registry, [renamed])
    try:
        handling.drain_one_round()
        assert renamed.calls == 2
        assert one_shard.count_notifications("SUCCEEDED") == 2
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        assert [r.handler_name for r in one_shard.notifications(state="PENDING")] == ["email"]
    finally:
        handling.close()


def test_a_handler_removed_from_code_fails_clearly_until_it_expires(one_shard, caplog):
    registry = registry_of([one_shard])
    create_gadgets(executor_for(registry), [one_shard], 1)
    gone_fanout, _ = jobs(registry, [RecordingHandler("gone"), RecordingHandler("email")])
    gone_fanout.drain_one_round()
    email = RecordingHandler("email")
    _, handling = jobs(registry, [email], max_backoff_cap=timedelta(milliseconds=5))
    try:
        assert handling.drain_one_round() is True
        assert email.calls == 1
        (row,) = one_shard.notifications(handler_name="gone")
        assert (row.state, row.attempts) == ("FAILED", 1)
        warned = [
            r.getMessage()
            for r in caplog.records
            if "No handler registered with name: gone" in r.getMessage()
        ]
        assert warned
    finally:
        handling.close()


def test_handlers_of_one_round_run_in_parallel(one_shard):
    registry = registry_of([one_shard])
    barrier = threading.Barrier(3, timeout=5)

    def meet(envelope, call):
        barrier.wait()  # three calls of one round must all be running at once

    handlers = [RecordingHandler(f"h{i}", behaviour=meet) for i in range(3)]
    fanout, handling = jobs(registry, handlers)
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert one_shard.count_notifications("SUCCEEDED") == 3
    finally:
        handling.close()


class AsyncRecorder(EventHandler[GadgetCreated]):
    def __init__(self, name, started: asyncio.Event | None = None) -> None:
        self._name = name
        self.received: list[EventEnvelope[GadgetCreated]] = []
        self.loops: set[int] = set()

    def name(self):
        return self._name

    def event_type(self):
        return GadgetCreated

    async def handle(self, envelope):
        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.01)
        self.received.append(envelope)


def test_async_and_sync_handlers_run_side_by_side(one_shard):
    registry = registry_of([one_shard])
    gate = threading.Event()
    async_handler = AsyncRecorder("async-recorder")

    def wait_for_async(envelope, call):
        # A sync handler blocked until the async one finished: possible only when they do not
        # share a thread.
        wait_until(lambda: async_handler.received, timeout=5)
        gate.set()

    sync_handler = RecordingHandler("sync", behaviour=wait_for_async)
    fanout, handling = jobs(registry, [sync_handler, async_handler])
    try:
        create_gadgets(executor_for(registry), [one_shard], 2)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert gate.is_set()
        assert len(async_handler.received) == 2 and sync_handler.calls == 2
        assert len(async_handler.loops) == 1
        assert one_shard.count_notifications("SUCCEEDED") == 4
    finally:
        handling.close()


def test_a_hung_handler_times_out_without_stalling_its_siblings(one_shard):
    registry = registry_of([one_shard])
    release, hung_returned = threading.Event(), threading.Event()

    def hang(envelope, call):
        release.wait(60)
        hung_returned.set()

    hung = RecordingHandler("hung", behaviour=hang)
    email = RecordingHandler("email")
    fanout, handling = jobs(registry, [hung, email], handler_timeout=timedelta(milliseconds=300))
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert not hung_returned.is_set(), "the round ended only when the hung call did"
        assert one_shard.count_notifications("SUCCEEDED") == 1
        (row,) = one_shard.notifications(handler_name="hung")
        assert (row.state, row.attempts) == ("FAILED", 1)
    finally:
        release.set()
        handling.close()


def test_a_stale_overlapping_run_cannot_overwrite_succeeded(one_shard):
    """Two handling runs read the same due row; the slower one's failure must not win."""
    registry = registry_of([one_shard])
    create_gadgets(executor_for(registry), [one_shard], 1)
    in_handler, let_fail = threading.Event(), threading.Event()

    def stall_then_fail(envelope, call):
        in_handler.set()
        let_fail.wait(10)
        raise RuntimeError("the stale run fails late")

    stale_handler = RecordingHandler("email", behaviour=stall_then_fail)
    fanout, stale = jobs(registry, [stale_handler])
    _, fresh = jobs(registry, [RecordingHandler("email")])
    try:
        fanout.drain_one_round()
        stale_round = threading.Thread(target=stale.drain_one_round)
        stale_round.start()
        assert in_handler.wait(10)
        assert fresh.drain_one_round() is True
        assert one_shard.notifications()[0].state == "SUCCEEDED"
        let_fail.set()
        stale_round.join(10)
        (row,) = one_shard.notifications()
        assert (row.state, row.attempts) == ("SUCCEEDED", 1)
    finally:
        let_fail.set()
        stale.close()
        fresh.close()


def test_listen_to_yourself_a_handler_runs_an_action_on_the_gadgets_shard(shards):
    registry = registry_of(shards)
    executor = executor_for(registry)
    last = shards[-1]

    class AutoNote(EventHandler[GadgetCreated]):
        def __init__(self):
            self.calls = 0

        def name(self):
            return "auto-note"

        def event_type(self):
            return GadgetCreated

        def handle(self, envelope):
            self.calls += 1
            executor.execute(
                NoteCreateAction(),
                NewNote(
                    gadget_id=uuid.UUID(envelope.event.model_id),
                    text=f"auto-note for gadget {envelope.event.name}",
                ),
            )

    class AuditWriter(EventHandler[NoteCreated]):
        def name(self):
            return "audit-writer"

        def event_type(self):
            return NoteCreated

        def handle(self, envelope):
            note_id = uuid.UUID(envelope.event.model_id)
            shard = ShardedUUID.shard_of(note_id)
            with registry.transaction(shard) as connection:
                connection.execute(
                    sa.insert(AuditEntry.__table__).values(
                        id=ShardedUUID.generate(shard), note_id=note_id, gadget_id=envelope.event.gadget_id
                    )
                )

    auto, recorder, audit = AutoNote(), RecordingHandler("note-recorder", NoteCreated), AuditWriter()
    fanout, handling = jobs(registry, [auto, recorder, audit])
    try:
        gadget_id = executor.execute(GadgetCreateAction(), NewGadget(last.shard, "alpha", "red"))
        fanout.drain_one_round()
        handling.drain_one_round()
        assert auto.calls == 1
        (note,) = last.rows(Note)
        assert note.gadget_id == gadget_id and note.text == "auto-note for gadget alpha"
        assert ShardedUUID.shard_of(note.id) == last.shard
        assert last.rows(AuditEntry) == []

        fanout.drain_one_round()
        handling.drain_one_round()
        assert recorder.calls == 1
        assert recorder.received[0].event.model_id == str(note.id)
        assert recorder.received[0].event.text == note.text
        (entry,) = last.rows(AuditEntry)
        assert (entry.note_id, entry.gadget_id) == (note.id, gadget_id)
        assert ShardedUUID.shard_of(entry.id) == last.shard
        assert auto.calls == 1
    finally:
        handling.close()


@pytest.mark.dialects("postgres")
def test_a_failing_shard_fails_the_round_after_the_others_finished(shards):
    registry = registry_of(shards)
    email = RecordingHandler("email")
    fanout, handling = jobs(registry, [email])
    try:
        create_gadgets(executor_for(registry), shards, 2)
        broken = shards[1]
        broken.execute(sa.text(f"ALTER TABLE {broken.eventlog}.event_notifications RENAME TO gone"))
        with pytest.raises(Exception, match=r"fan-out of shard \(1,0\) failed") as raised:
            fanout.drain_one_round()
        assert raised.value.shard == ShardIdentifier(1, 0)
        assert shards[0].count_notifications("PENDING") == 1
    finally:
        handling.close()


def test_hung_handlers_holding_every_thread_do_not_starve_the_next_round(one_shard):
    """A batch of 2 gives the job 2 threads; round one's 2 hung calls keep both. The next
    round's calls must run on fresh threads, not wait behind them or time out unstarted."""
    registry = registry_of([one_shard])
    release, hung_returned = threading.Event(), threading.Event()

    def hang_on_first_call(envelope, call):
        if call == 1:
            release.wait(60)
            hung_returned.set()

    hung_a = RecordingHandler("a", behaviour=hang_on_first_call)
    hung_b = RecordingHandler("b", behaviour=hang_on_first_call)
    fanout, handling = jobs(
        registry, [hung_a, hung_b], handler_timeout=timedelta(milliseconds=300), batch_size=2
    )
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert sorted(r.handler_name for r in one_shard.notifications(state="FAILED")) == ["a", "b"]
        executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "second", "red"))
        fanout.drain_one_round()
        handling.drain_one_round()
        assert not hung_returned.is_set(), "round two waited behind the hung threads"
        succeeded = one_shard.notifications(state="SUCCEEDED")
        assert sorted((r.handler_name, r.payload["name"]) for r in succeeded) == [
            ("a", "second"),
            ("b", "second"),
        ]
    finally:
        release.set()
        handling.close()
