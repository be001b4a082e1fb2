"""Trace context from an action to its handlers: ``ActionExecutor(tracing=True)`` makes a span
per action and keeps its context in ``action_traces``; each handler call's span links to it
(or is its child) — in this process and in another one — on every dialect. Tracing never fails
an action, and the kept contexts are pruned past the retention window."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pipeline_support import NAMESPACE, RecordingHandler

from ekbatan.core import Action, ActionExecutor, DatabaseRegistry, eventlog_tables
from ekbatan.core.outbox import UtcClock
from ekbatan.local_event_handler import EventFanoutJob, EventHandlerRegistry, EventHandlingJob
from testsupport import wait_until
from testsupport.sample_domain import GadgetCreateAction, NewGadget

HERE = Path(__file__).resolve().parent


class Spans:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def named(self, prefix: str) -> list[Any]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]


def traced_executor(registry: DatabaseRegistry, spans: Spans) -> ActionExecutor:
    return ActionExecutor(registry, namespace=NAMESPACE, tracing=True, tracer_provider=spans.provider)


def pipeline(registry: DatabaseRegistry, handlers: list[Any], spans: Spans, context: str = "link") -> Any:
    handler_registry = EventHandlerRegistry.builder().with_handlers(handlers).build()
    fanout = (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(UtcClock())
        .wakeups(False)
        .build()
    )
    handling = (
        EventHandlingJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(UtcClock())
        .wakeups(False)
        .telemetry(metrics=False, tracer_provider=spans.provider, action_context=context)
        .build()
    )
    return fanout, handling


def drain(job: Any) -> None:
    wait_until(lambda: not job.drain_one_round(), timeout=30, message=f"{job} drained")


def kept(shard: Any) -> dict[uuid.UUID, str]:
    table = eventlog_tables(shard.manager.dialect, shard.eventlog).action_traces
    with shard.manager.primary.connect() as connection:
        return {row.action_id: row.traceparent for row in connection.execute(sa.select(table))}


def action_of_event(shard: Any) -> dict[str, uuid.UUID]:
    return {str(row.id): row.action_id for row in shard.events()}


@pytest.mark.parametrize("context", ["link", "parent"])
def test_each_handler_span_links_to_or_is_a_child_of_its_actions_span(dialect, one_shard, context):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    producer, consumer = Spans(), Spans()  # two providers: nothing shared but the database
    executor = traced_executor(registry, producer)
    for i in range(3):
        executor.execute(GadgetCreateAction(), NewGadget(one_shard.shard, f"w-{i}", "red"))
    actions = {uuid.UUID(s.attributes["ekbatan.action_id"]): s for s in producer.named("action ")}
    assert len(actions) == 3 and {s.name for s in actions.values()} == {"action GadgetCreateAction"}
    # one context kept per action, the action span's own
    traceparents = kept(one_shard)
    assert set(traceparents) == set(actions)
    for action_id, span in actions.items():
        assert traceparents[action_id] == (
            f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-{span.context.trace_flags:02x}"
        )

    receipts, audit = RecordingHandler("receipts"), RecordingHandler("audit")
    fanout, handling = pipeline(registry, [receipts, audit], consumer, context)
    drain(fanout)
    drain(handling)
    calls = consumer.named("process ")
    assert len(calls) == 6
    action_ids = action_of_event(one_shard)
    for call in calls:
        action = actions[action_ids[call.attributes["messaging.message.id"]]]
        if context == "link":
            assert [link.context.span_id for link in call.links] == [action.context.span_id]
            assert call.context.trace_id != action.context.trace_id and call.parent is None
        else:
            assert call.parent.span_id == action.context.span_id and not call.links
            assert call.context.trace_id == action.context.trace_id


def test_off_reads_nothing_and_untraced_actions_keep_nothing(dialect, one_shard):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    spans = Spans()
    ActionExecutor(registry, namespace=NAMESPACE).execute(
        GadgetCreateAction(), NewGadget(one_shard.shard, "a", "b")
    )
    assert kept(one_shard) == {}, "an executor without tracing keeps no context"
    traced_executor(registry, spans).execute(GadgetCreateAction(), NewGadget(one_shard.shard, "c", "d"))
    assert len(kept(one_shard)) == 1
    fanout, handling = pipeline(registry, [RecordingHandler("receipts")], spans, context="off")
    drain(fanout)
    drain(handling)
    calls = spans.named("process ")
    assert len(calls) == 2 and all(not call.links and call.parent is None for call in calls)


class Refused(Action[NewGadget, None]):
    def perform(self, principal: Any, params: NewGadget) -> None:
        GadgetCreateAction().perform(principal, params)
        raise ValueError("out of stock")


def test_a_failed_action_has_an_error_span_and_keeps_nothing(dialect, one_shard):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    spans = Spans()
    with pytest.raises(ValueError, match="out of stock"):
        traced_executor(registry, spans).execute(Refused(), NewGadget(one_shard.shard, "a", "b"))
    [span] = spans.named("action ")
    assert span.name == "action Refused" and span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert kept(one_shard) == {} and one_shard.events() == []


def test_a_missing_table_never_fails_an_action_and_says_what_to_run(dialect, one_shard, caplog):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    table = eventlog_tables(one_shard.manager.dialect, one_shard.eventlog).action_traces
    with one_shard.manager.primary.begin() as connection:
        table.drop(connection)
    spans = Spans()
    executor = traced_executor(registry, spans)
    with caplog.at_level(logging.WARNING, logger="ekbatan.core.outbox.tracing"):
        for i in range(2):
            executor.execute(GadgetCreateAction(), NewGadget(one_shard.shard, f"w-{i}", "red"))
    warnings = [r.getMessage() for r in caplog.records if r.name == "ekbatan.core.outbox.tracing"]
    assert len(warnings) == 1 and "run 'ekbatan migrate' (outbox 1)" in warnings[0], warnings
    assert len(one_shard.events()) == 2
    receipts = RecordingHandler("receipts")
    fanout, handling = pipeline(registry, [receipts], spans)
    drain(fanout)
    drain(handling)
    assert receipts.calls == 2 and all(not call.links for call in spans.named("process "))


def test_contexts_older_than_the_retention_window_are_pruned(dialect, one_shard):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    table = eventlog_tables(one_shard.manager.dialect, one_shard.eventlog).action_traces
    now = datetime.now(UTC)
    old, fresh = uuid.uuid4(), uuid.uuid4()
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with one_shard.manager.primary.begin() as connection:
        connection.execute(
            table.insert(),
            [
                {"action_id": old, "traceparent": traceparent, "recorded": now - timedelta(days=8)},
                {"action_id": fresh, "traceparent": traceparent, "recorded": now - timedelta(days=6)},
            ],
        )
    _, handling = pipeline(registry, [RecordingHandler("receipts")], Spans())
    handling.drain_one_round()  # the retention window is 7 days by default
    assert set(kept(one_shard)) == {fresh}


@pytest.mark.dialects("postgres")
def test_a_handler_in_another_process_links_to_the_action(one_shard, tmp_path):
    registry = DatabaseRegistry([one_shard.manager], default_shard=one_shard.shard)
    producer = Spans()
    executor = traced_executor(registry, producer)
    executor.execute(GadgetCreateAction(), NewGadget(one_shard.shard, "w", "red"))
    [action] = producer.named("action ")
    out = tmp_path / "spans.json"
    node = subprocess.run(
        [
            sys.executable,
            str(HERE / "leh_tracing_node.py"),
            one_shard.database.url,
            one_shard.eventlog,
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert node.returncode == 0, node.stdout + node.stderr
    spans = json.loads(out.read_text())
    assert [s["name"] for s in spans] == ["process receipts"]
    assert spans[0]["links"] == [[f"{action.context.trace_id:032x}", f"{action.context.span_id:016x}"]]
    assert spans[0]["pid"] != os.getpid()
