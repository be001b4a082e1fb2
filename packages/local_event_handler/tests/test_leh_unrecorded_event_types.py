"""A handler subscribed to an event type no action records is warned about once per shard at the
fan-out's first round there, when the eventlog shows which types the actions record."""

from __future__ import annotations

import logging

import pytest
from pipeline_support import RecordingHandler, executor_for, registry_of

from ekbatan.core import UtcClock
from ekbatan.local_event_handler import (
    EventFanoutJob,
    EventHandlerRegistry,
    UnrecordedSubscription,
    unrecorded_subscriptions,
)
from testsupport.sample_domain import GadgetCreateAction, NewGadget, NoteCreated

LOGGER = "ekbatan.local_event_handler"


def fanout_of(registry, handlers) -> EventFanoutJob:
    return (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(EventHandlerRegistry.builder().with_handlers(handlers).build())
        .clock(UtcClock())
        .build()
    )


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and "subscribes to event type" in r.getMessage()
    ]


def test_the_fanout_warns_once_about_a_handler_of_an_event_type_nobody_records(one_shard, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    registry = registry_of([one_shard])
    executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red"))
    gadgets, notes = RecordingHandler("gadget-mail"), RecordingHandler("note-mail", NoteCreated)
    fanout = fanout_of(registry, [gadgets, notes])
    try:
        assert fanout.drain_one_round()
        fanout.drain_one_round()
    finally:
        fanout.close()
    [line] = warnings(caplog)
    assert "handler 'note-mail' subscribes to event type 'NoteCreated'" in line
    assert str(one_shard.shard) in line


def test_an_empty_eventlog_says_nothing_about_any_handler(one_shard, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    registry = registry_of([one_shard])
    fanout = fanout_of(registry, [RecordingHandler("note-mail", NoteCreated)])
    try:
        fanout.drain_one_round()
    finally:
        fanout.close()
    assert warnings(caplog) == []
    with one_shard.manager.primary.connect() as connection:
        registry_ = EventHandlerRegistry.builder().with_handler(RecordingHandler("x", NoteCreated)).build()
        assert (
            unrecorded_subscriptions(connection, one_shard.manager.dialect, one_shard.eventlog, registry_)
            is None
        )


def test_unrecorded_subscriptions_lists_every_handler_of_a_missing_type(one_shard):
    registry = registry_of([one_shard])
    executor_for(registry).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red"))
    handlers = (
        EventHandlerRegistry.builder()
        .with_handlers(
            [
                RecordingHandler("a", NoteCreated),
                RecordingHandler("b"),
                RecordingHandler("c", NoteCreated),
            ]
        )
        .build()
    )
    with one_shard.manager.primary.connect() as connection:
        found = unrecorded_subscriptions(connection, one_shard.manager.dialect, one_shard.eventlog, handlers)
    assert found == [
        UnrecordedSubscription("a", "NoteCreated"),
        UnrecordedSubscription("c", "NoteCreated"),
    ]
