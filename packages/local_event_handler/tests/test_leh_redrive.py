"""``redrive_notifications``: failed and expired notifications of one handler go back to PENDING
and are really delivered again by the handling job — an expired one too, whose event is older
than the retention window (the re-drive restarts the row's window)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from pipeline_support import RecordingHandler, SettableClock, executor_for, registry_of
from test_leh_pipeline import create_gadgets, jobs

from ekbatan.local_event_handler import NotificationState, notifications_table, redrive_notifications


class Switch:
    """A handler behaviour that fails until the cause is fixed."""

    def __init__(self) -> None:
        self.broken = True

    def __call__(self, envelope: object, call: int) -> None:
        if self.broken:
            raise RuntimeError("the carrier's API is down")


def test_a_failed_notification_is_delivered_again_now_after_a_redrive(shards):
    registry = registry_of(shards)
    switch = Switch()
    carrier = RecordingHandler("notify-carrier", behaviour=switch)
    bystander = RecordingHandler("bystander", behaviour=lambda e, c: (_ for _ in ()).throw(ValueError("x")))
    fanout, handling = jobs(registry, [carrier, bystander])  # the first retry is 30 s away
    try:
        create_gadgets(executor_for(registry), shards, 2)
        fanout.drain_one_round()
        assert handling.drain_one_round() is True
        failed = [r for s in shards for r in s.notifications(state="FAILED", handler_name="notify-carrier")]
        assert len(failed) == 2 and carrier.calls == 2
        assert handling.drain_one_round() is False  # not due again before its backoff
        switch.broken = False

        changed = sum(
            redrive_notifications(s.manager.primary.engine, "notify-carrier", eventlog_schema=s.eventlog)
            for s in shards
        )

        assert changed == 2
        assert handling.drain_one_round() is True
        assert carrier.calls == 4
        redelivered = {e.event_id for e in carrier.received[2:]}
        assert redelivered == {r.event_id for r in failed}
        done = [r for s in shards for r in s.notifications(handler_name="notify-carrier")]
        assert [(r.state, r.attempts) for r in done] == [("SUCCEEDED", 1)] * 2
        # another handler's failed rows were not touched: still waiting out their backoff
        others = [r for s in shards for r in s.notifications(handler_name="bystander")]
        assert [(r.state, r.attempts) for r in others] == [("FAILED", 1)] * 2
        assert bystander.calls == 2
    finally:
        handling.close()


def test_an_expired_notification_is_delivered_again_not_expired_at_once(one_shard):
    registry = registry_of([one_shard])
    carrier = RecordingHandler("notify-carrier")
    clock = SettableClock(datetime.now(UTC))
    fanout, handling = jobs(registry, [carrier], handling_clock=clock, retention_window=timedelta(minutes=1))
    try:
        create_gadgets(executor_for(registry), [one_shard], 1)
        fanout.drain_one_round()
        clock.advance(timedelta(hours=1))  # the event is older than the window: expires uncalled
        handling.drain_one_round()
        (expired,) = one_shard.notifications()
        assert (expired.state, expired.attempts, carrier.calls) == ("EXPIRED", 0, 0)

        assert (
            redrive_notifications(
                one_shard.manager.primary.engine,
                "notify-carrier",
                states=["expired"],
                eventlog_schema=one_shard.eventlog,
                now=clock.now(),
            )
            == 1
        )

        (pending,) = one_shard.notifications()
        assert (pending.state, pending.attempts) == ("PENDING", 0)
        assert pending.next_retry_at == pending.event_date == clock.now()
        assert handling.drain_one_round() is True
        assert carrier.calls == 1 and carrier.received[0].event_id == expired.event_id
        (row,) = one_shard.notifications()
        assert (row.state, row.attempts) == ("SUCCEEDED", 1)
        # the event itself keeps when it happened
        (event,) = one_shard.events()
        assert event.event_date == expired.event_date
    finally:
        handling.close()


def test_only_the_named_states_go_back_and_nothing_twice(one_shard):
    registry = registry_of([one_shard])
    switch = Switch()
    carrier = RecordingHandler("notify-carrier", behaviour=switch)
    fanout, handling = jobs(registry, [carrier])
    try:
        create_gadgets(executor_for(registry), [one_shard], 5)
        fanout.drain_one_round()
        handling.drain_one_round()
        assert one_shard.count_notifications("FAILED") == 5
        table = notifications_table(one_shard.manager.dialect, one_shard.eventlog)
        ids = [r.id for r in one_shard.notifications()]
        # one succeeded elsewhere, one expired: the FAILED re-drive leaves both
        one_shard.execute(sa.update(table).where(table.c.id == ids[0]).values(state="SUCCEEDED"))
        one_shard.execute(sa.update(table).where(table.c.id == ids[1]).values(state="EXPIRED"))
        engine = one_shard.manager.primary.engine

        def redrive(**options: object) -> int:
            return redrive_notifications(
                engine, "notify-carrier", eventlog_schema=one_shard.eventlog, **options
            )

        assert redrive(states=[NotificationState.FAILED], limit=2, batch_size=1) == 2
        assert one_shard.count_notifications("PENDING") == 2
        assert redrive(states="FAILED", batch_size=1) == 1  # the last failed one, in batches of one
        assert one_shard.count_notifications("FAILED") == 0
        assert {r.id: r.state for r in one_shard.notifications()}[ids[0]] == "SUCCEEDED"
        assert redrive(states="FAILED") == 0
        assert redrive() == 1  # both states by default: the expired one
        assert one_shard.count_notifications("PENDING") == 4
    finally:
        handling.close()


def test_a_connection_redrives_in_its_own_transaction(one_shard):
    registry = registry_of([one_shard])
    switch = Switch()
    fanout, handling = jobs(registry, [RecordingHandler("notify-carrier", behaviour=switch)])
    try:
        create_gadgets(executor_for(registry), [one_shard], 2)
        fanout.drain_one_round()
        handling.drain_one_round()
        with one_shard.manager.primary.engine.connect() as connection:
            assert (
                redrive_notifications(connection, "notify-carrier", eventlog_schema=one_shard.eventlog) == 2
            )
            connection.rollback()
        assert one_shard.count_notifications("FAILED") == 2
        with one_shard.manager.primary.engine.begin() as connection:
            assert (
                redrive_notifications(connection, "notify-carrier", eventlog_schema=one_shard.eventlog) == 2
            )
        assert one_shard.count_notifications("PENDING") == 2
    finally:
        handling.close()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"states": ["SUCCEEDED"]}, "only FAILED and EXPIRED"),
        ({"states": ["PENDING", "FAILED"]}, "only FAILED and EXPIRED"),
        ({"states": []}, "states is empty"),
        ({"limit": 0}, "limit must be a positive int"),
        ({"batch_size": 0}, "batch_size must be a positive int"),
    ],
)
def test_bad_arguments_are_refused_before_anything_changes(options, error):
    engine = sa.create_engine("sqlite://")
    with pytest.raises(ValueError, match=error):
        redrive_notifications(engine, "notify-carrier", **options)
    with pytest.raises(ValueError, match="non-blank handler name"):
        redrive_notifications(engine, " ")
