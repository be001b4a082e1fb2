"""Another process handling an eventlog's events with tracing on:
``python leh_tracing_node.py URL EVENTLOG OUT``. It fans the events out, calls a handler named
``receipts`` for each, and writes the finished handler spans (name, links, pid) to ``OUT``."""

from __future__ import annotations

import json
import os
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pipeline_support import SHARDS, RecordingHandler

from ekbatan.core import ConnectionProvider, DatabaseRegistry, TransactionManager
from ekbatan.core.outbox import UtcClock
from ekbatan.local_event_handler import EventFanoutJob, EventHandlerRegistry, EventHandlingJob


def main(url: str, eventlog: str, out: str) -> int:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    manager = TransactionManager(ConnectionProvider.from_url(url), shard=SHARDS[0], eventlog_schema=eventlog)
    registry = DatabaseRegistry([manager], default_shard=SHARDS[0])
    handlers = EventHandlerRegistry.builder().with_handlers([RecordingHandler("receipts")]).build()
    fanout = EventFanoutJob.builder().database_registry(registry).event_handler_registry(handlers)
    handling = EventHandlingJob.builder().database_registry(registry).event_handler_registry(handlers)
    fanout_job = fanout.clock(UtcClock()).wakeups(False).build()
    handling_job = (
        handling.clock(UtcClock()).wakeups(False).telemetry(metrics=False, tracer_provider=provider).build()
    )
    while fanout_job.drain_one_round():
        pass
    while handling_job.drain_one_round():
        pass
    spans = [
        {
            "name": span.name,
            "links": [
                [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in span.links
            ],
            "pid": os.getpid(),
        }
        for span in exporter.get_finished_spans()
    ]
    with open(out, "w") as file:
        json.dump(spans, file)
    manager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
