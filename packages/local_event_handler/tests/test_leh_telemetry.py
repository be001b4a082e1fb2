"""The event pipeline's metrics and traces, recorded with the real OpenTelemetry SDK (in-memory
reader and exporter) and served by a ``prometheus_client`` registry with no SDK, on every
dialect: counts match the events handled, durations and lags are plausible, the gauges follow the
backlog, no attribute names an id."""

from __future__ import annotations

import logging
from datetime import timedelta
from itertools import accumulate
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pipeline_support import RecordingHandler, SettableClock, executor_for, registry_of
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ekbatan.core import DatabaseRegistry, LocalEventHandlerConfig, TransactionManager
from ekbatan.core.outbox import UtcClock
from ekbatan.distributed_jobs.scheduler import opentelemetry_sdk_provider
from ekbatan.local_event_handler import (
    EventFanoutJob,
    EventHandlerRegistry,
    EventHandlingJob,
    EventPipelineTelemetry,
    event_pipeline_jobs,
)
from testsupport import wait_until
from testsupport.sample_domain import GadgetCreateAction, NewGadget

#: a handler call or a delivery in these tests takes far less
BOUND = 30.0


class Telemetry:
    """An SDK meter provider and tracer provider that keep everything in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def points(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        if data is None:
            return {}
        return {
            metric.name: list(metric.data.data_points)
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def options(self, **more: Any) -> dict[str, Any]:
        return {"meter_provider": self.meter_provider, "tracer_provider": self.tracer_provider, **more}


def by_attributes(points: list[Any]) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted(point.attributes.items())): point for point in points}


def jobs(registry: DatabaseRegistry, handlers: list[Any], telemetry: Any, *, clock: Any = None) -> Any:
    """``telemetry``: a :class:`Telemetry`, or the options of ``telemetry(...)`` as a dict."""
    options = telemetry if isinstance(telemetry, dict) else telemetry.options()
    handler_registry = EventHandlerRegistry.builder().with_handlers(handlers).build()
    fanout = (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(UtcClock())
        .wakeups(False)
        .telemetry(**options)
        .build()
    )
    handling = (
        EventHandlingJob.builder()
        .database_registry(registry)
        .event_handler_registry(handler_registry)
        .clock(clock or UtcClock())
        .wakeups(False)
        .telemetry(**options, gauge_interval=timedelta(milliseconds=1))
        .build()
    )
    return fanout, handling


def fail_first(envelope: Any, call: int) -> None:
    if call == 1:
        raise RuntimeError("the mail server is down")


def drain(job: Any) -> None:
    """Rounds until one finds nothing (each round is bounded by the batch size)."""
    wait_until(lambda: not job.drain_one_round(), timeout=30, message=f"{job} drained")


def create_gadgets(registry: DatabaseRegistry, shards: list[Any], count: int) -> None:
    executor = executor_for(registry)
    for i in range(count):
        executor.execute(GadgetCreateAction(), NewGadget(shards[i % len(shards)].shard, f"w-{i}", "red"))


def assert_no_id_attribute(points: dict[str, list[Any]]) -> None:
    for name, series in points.items():
        for point in series:
            for key in point.attributes:
                assert "id" not in key.lower(), (name, key)


def test_counts_lags_durations_gauges_and_spans_match_the_events_handled(dialect, shards):
    registry = registry_of(shards)
    telemetry = Telemetry()
    receipts, audit = RecordingHandler("receipts"), RecordingHandler("audit")
    fanout, handling = jobs(registry, [receipts, audit], telemetry)
    events = 7
    try:
        create_gadgets(registry, shards, events)
        # before the fan-out: nothing delivered, nothing counted, no notification waits
        before = telemetry.points()
        assert "ekbatan.events.recorded" not in before
        states = by_attributes(before["ekbatan.notifications"])
        assert {p.value for p in states.values()} == {0}

        drain(fanout)
        points = telemetry.points()
        [recorded] = points["ekbatan.events.recorded"]
        assert dict(recorded.attributes) == {"event_type": "GadgetCreated"}
        assert recorded.value == events
        states = by_attributes(points["ekbatan.notifications"])
        for handler in ("receipts", "audit"):
            assert states[(("handler", handler), ("state", "pending"))].value == events
            assert states[(("handler", handler), ("state", "failed"))].value == 0
        ages = by_attributes(points["ekbatan.notifications.oldest_pending_age"])
        assert {key for key in ages} == {(("handler", "receipts"),), (("handler", "audit"),)}
        assert all(0 <= p.value < BOUND for p in ages.values())

        drain(handling)
        assert receipts.calls == events and audit.calls == events
        points = telemetry.points()
        durations = by_attributes(points["ekbatan.handler.duration"])
        assert set(durations) == {
            (("handler", "audit"), ("result", "succeeded")),
            (("handler", "receipts"), ("result", "succeeded")),
        }
        for point in durations.values():
            assert point.count == events
            assert 0 <= point.min <= point.max < BOUND
        lags = by_attributes(points["ekbatan.event.delivery_lag"])
        assert set(lags) == {(("handler", "audit"),), (("handler", "receipts"),)}
        for point in lags.values():
            assert point.count == events
            assert 0 <= point.min <= point.max < BOUND
        states = by_attributes(points["ekbatan.notifications"])
        assert {p.value for p in states.values()} == {0}  # all handled
        ages = by_attributes(points["ekbatan.notifications.oldest_pending_age"])
        assert {p.value for p in ages.values()} == {0.0}
        [recorded] = points["ekbatan.events.recorded"]
        assert recorded.value == events  # counted once, not again by later rounds
        assert_no_id_attribute(points)

        spans = telemetry.spans.get_finished_spans()
        assert len(spans) == 2 * events
        assert {span.name for span in spans} == {"process receipts", "process audit"}
        delivered = {
            (span.attributes["ekbatan.handler"], span.attributes["messaging.message.id"]) for span in spans
        }
        assert len(delivered) == 2 * events
        for span in spans:
            assert span.kind is SpanKind.CONSUMER
            assert span.attributes["messaging.system"] == "ekbatan"
            assert span.attributes["messaging.operation.name"] == "process"
            assert span.attributes["messaging.destination.name"] == span.attributes["ekbatan.handler"]
            assert span.attributes["ekbatan.event_type"] == "GadgetCreated"
            assert span.attributes["ekbatan.result"] == "succeeded"
            assert span.status.status_code is not StatusCode.ERROR
    finally:
        handling.close()
        fanout.close()


def test_a_failing_handler_is_measured_as_failed_then_succeeded_and_its_span_records_the_error(
    dialect, one_shard
):
    registry = registry_of([one_shard])
    telemetry = Telemetry()
    clock = SettableClock(UtcClock().now() + timedelta(minutes=1))  # the event is due at once
    flaky = RecordingHandler("flaky", behaviour=fail_first)
    fanout, handling = jobs(registry, [flaky], telemetry, clock=clock)
    try:
        create_gadgets(registry, [one_shard], 1)
        drain(fanout)
        drain(handling)
        points = telemetry.points()
        assert (
            by_attributes(points["ekbatan.notifications"])[(("handler", "flaky"), ("state", "failed"))].value
            == 1
        )
        [failed] = points["ekbatan.handler.duration"]
        assert dict(failed.attributes) == {"handler": "flaky", "result": "failed"} and failed.count == 1

        clock.advance(timedelta(minutes=10))  # past the first backoff
        drain(handling)
        points = telemetry.points()
        durations = by_attributes(points["ekbatan.handler.duration"])
        assert durations[(("handler", "flaky"), ("result", "failed"))].count == 1
        assert durations[(("handler", "flaky"), ("result", "succeeded"))].count == 1
        [lag] = points["ekbatan.event.delivery_lag"]
        assert lag.count == 1  # the first call only: a retry's wait is its backoff
        assert {p.value for p in points["ekbatan.notifications"]} == {0}
        assert_no_id_attribute(points)

        first, second = sorted(telemetry.spans.get_finished_spans(), key=lambda span: span.start_time)
        assert first.status.status_code is StatusCode.ERROR
        assert first.attributes["ekbatan.result"] == "failed"
        assert first.attributes["error.type"] == "RuntimeError"
        assert first.attributes["ekbatan.attempt"] == 1
        [exception] = [event for event in first.events if event.name == "exception"]
        assert "mail server is down" in exception.attributes["exception.message"]
        assert (
            second.attributes["ekbatan.result"] == "succeeded" and second.attributes["ekbatan.attempt"] == 2
        )
    finally:
        handling.close()
        fanout.close()


@pytest.mark.dialects("sqlite", "postgres")
def test_an_async_handler_runs_inside_its_span(dialect, one_shard):
    from opentelemetry import trace

    registry = registry_of([one_shard])
    telemetry = Telemetry()
    seen: list[Any] = []

    class AsyncHandler(RecordingHandler):
        async def handle(self, envelope: Any) -> None:  # type: ignore[override]
            seen.append(trace.get_current_span().get_span_context())

    fanout, handling = jobs(registry, [AsyncHandler("async-audit")], telemetry)
    try:
        create_gadgets(registry, [one_shard], 1)
        drain(fanout)
        drain(handling)
        [span] = telemetry.spans.get_finished_spans()
        assert [context.span_id for context in seen] == [span.context.span_id]
    finally:
        handling.close()
        fanout.close()


@pytest.mark.dialects("sqlite", "postgres")
def test_the_gauges_read_the_table_at_most_once_per_interval(dialect, one_shard, monkeypatch):
    registry = registry_of([one_shard])
    telemetry = Telemetry()
    handlers = EventHandlerRegistry.builder().with_handler(RecordingHandler("receipts")).build()
    handling = (
        EventHandlingJob.builder()
        .database_registry(registry)
        .event_handler_registry(handlers)
        .clock(UtcClock())
        .telemetry(**telemetry.options())  # the default interval: 30 s
        .build()
    )
    try:
        gauges = handling._telemetry.gauges
        reads = []
        real_read = gauges._read
        monkeypatch.setattr(gauges, "_read", lambda: reads.append(1) or real_read())
        for _ in range(3):
            points = telemetry.points()
            assert len(points["ekbatan.notifications"]) == 2  # pending and failed: 0 each
        assert len(reads) == 1
    finally:
        handling.close()


@pytest.mark.dialects("sqlite", "postgres")
def test_a_failed_gauge_read_is_logged_once_and_reports_nothing(dialect, one_shard, caplog, monkeypatch):
    # an eventlog that does not exist: every read fails
    manager = TransactionManager(
        one_shard.manager.primary, shard=one_shard.shard, eventlog_schema="el_missing"
    )
    registry = DatabaseRegistry([manager], default_shard=one_shard.shard)
    telemetry = Telemetry()
    handlers = EventHandlerRegistry.builder().with_handler(RecordingHandler("receipts")).build()
    handling = (
        EventHandlingJob.builder()
        .database_registry(registry)
        .event_handler_registry(handlers)
        .clock(UtcClock())
        .telemetry(**telemetry.options(gauge_interval=timedelta(milliseconds=1)))
        .build()
    )
    gauges = handling._telemetry.gauges
    reads = []
    real_read = gauges._read
    monkeypatch.setattr(gauges, "_read", lambda: reads.append(1) or real_read())

    def collected_without_gauges() -> bool:
        points = telemetry.points()
        assert "ekbatan.notifications" not in points
        assert "ekbatan.notifications.oldest_pending_age" not in points
        return len(reads) >= 3

    try:
        with caplog.at_level(logging.WARNING, logger="ekbatan.local_event_handler.telemetry"):
            wait_until(collected_without_gauges, message="three failed reads")
        warnings = [r for r in caplog.records if "notification gauges failed" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        handling.close()


@pytest.mark.dialects("sqlite")
def test_telemetry_is_off_unless_asked_for_and_off_builds_nothing(dialect, one_shard):
    registry = registry_of([one_shard])
    handlers = EventHandlerRegistry.builder().with_handler(RecordingHandler("receipts")).build()
    builder = (
        EventFanoutJob.builder()
        .database_registry(registry)
        .event_handler_registry(handlers)
        .clock(UtcClock())
    )
    assert builder.build()._metrics is None
    assert builder.telemetry(False).build()._metrics is None
    off = CollectorRegistry()  # metrics off: nothing is served either
    assert builder.telemetry(metrics=False, prometheus_registry=off).build()._metrics is None
    assert generate_latest(off) == b""
    with pytest.raises(ValueError, match="gauge_interval must be positive"):
        builder.telemetry(gauge_interval=timedelta(0))


@pytest.mark.dialects("sqlite")
def test_with_no_sdk_installed_nothing_is_built(dialect, one_shard, caplog):
    registry = registry_of([one_shard])
    handlers = EventHandlerRegistry.builder().with_handler(RecordingHandler("receipts")).build()
    with caplog.at_level(logging.INFO, logger="ekbatan.local_event_handler.telemetry"):
        # OpenTelemetry's global providers are its no-ops until an application installs an SDK
        fanout = (
            EventFanoutJob.builder()
            .database_registry(registry)
            .event_handler_registry(handlers)
            .clock(UtcClock())
            .telemetry()
            .build()
        )
    assert fanout._metrics is None
    assert any("no OpenTelemetry SDK meter provider" in r.getMessage() for r in caplog.records)


def test_event_pipeline_jobs_gives_both_jobs_the_telemetry(dialect, one_shard):
    registry = registry_of([one_shard])
    telemetry = Telemetry()
    handler = RecordingHandler("receipts")
    handlers = EventHandlerRegistry.builder().with_handler(handler).build()
    config = LocalEventHandlerConfig.model_validate({"handling": {"enabled": True}})
    fanout, handling = event_pipeline_jobs(
        config,
        database_registry=registry,
        event_handler_registry=handlers,
        telemetry=EventPipelineTelemetry(**telemetry.options()),
    )
    try:
        create_gadgets(registry, [one_shard], 3)
        drain(fanout)
        drain(handling)
        points = telemetry.points()
        assert [p.value for p in points["ekbatan.events.recorded"]] == [3]
        assert [p.count for p in points["ekbatan.handler.duration"]] == [3]
        assert len(telemetry.spans.get_finished_spans()) == 3
    finally:
        handling.close()
        fanout.close()


# ---------------------------------------------------------------- Prometheus, no SDK in between

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
RECORDED, DURATION = "ekbatan_events_recorded_total", "ekbatan_handler_duration_seconds"
CALLS, LAGS = f"{DURATION}_count", "ekbatan_event_delivery_lag_seconds_count"
WAITING, AGES = "ekbatan_notifications", "ekbatan_notifications_oldest_pending_age_seconds"
OLDEST_AGE = "ekbatan.notifications.oldest_pending_age"


def scrape(registry: CollectorRegistry) -> Samples:
    """Each sample's value by its name and its sorted labels, parsed from the exposition text."""
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            series = samples.setdefault(sample.name, {})
            labels = tuple(sorted(sample.labels.items()))
            assert labels not in series, f"{sample.name}{labels} served twice"
            series[labels] = sample.value
    return samples


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


def test_a_prometheus_registry_without_an_sdk_serves_exact_counts(dialect, shards, caplog):
    assert opentelemetry_sdk_provider(None, "metrics", quiet=True) is None  # the global one is a no-op
    registry, prom = registry_of(shards), CollectorRegistry()
    receipts, flaky = RecordingHandler("receipts"), RecordingHandler("flaky", behaviour=fail_first)
    clock = SettableClock(UtcClock().now() + timedelta(minutes=1))  # the events are due at once
    with caplog.at_level(logging.INFO):
        fanout, handling = jobs(registry, [receipts, flaky], {"prometheus_registry": prom}, clock=clock)
    logged = " ".join(r.getMessage() for r in caplog.records)  # spans still need an SDK: said
    assert "no OpenTelemetry SDK meter provider" not in logged and "SDK tracer provider" in logged
    events, both = 5, ("receipts", "flaky")
    zeros = {(("handler", h), ("state", s)): 0 for h in both for s in ("pending", "failed")}
    try:
        create_gadgets(registry, shards, events)
        before = scrape(prom)
        assert RECORDED not in before and CALLS not in before and LAGS not in before
        assert before[WAITING] == zeros

        drain(fanout)
        samples = scrape(prom)
        assert samples[RECORDED] == {(("event_type", "GadgetCreated"),): events}
        assert samples[WAITING] == {key: events if ("state", "pending") in key else 0 for key in zeros}
        assert all(0 < sample(samples, AGES, handler=h) < 60 + BOUND for h in both)  # clock: a minute ahead

        drain(handling)
        samples = scrape(prom)
        calls = {
            (("handler", "receipts"), ("result", "succeeded")): events,
            (("handler", "flaky"), ("result", "succeeded")): events - 1,
            (("handler", "flaky"), ("result", "failed")): 1,
        }
        assert samples[CALLS] == calls
        for labels, count in samples[CALLS].items():
            assert sample(samples, f"{DURATION}_bucket", **dict(labels), le="+Inf") == count
        assert samples[LAGS] == {(("handler", "receipts"),): events, (("handler", "flaky"),): events}
        assert samples[WAITING] == {**zeros, (("handler", "flaky"), ("state", "failed")): 1}

        clock.advance(timedelta(minutes=10))  # past the failed call's backoff
        drain(handling)
        samples = scrape(prom)
        assert samples[CALLS] == {**calls, (("handler", "flaky"), ("result", "succeeded")): events}
        assert set(samples[LAGS].values()) == {events}  # a retry is no delivery: not measured again
        assert samples[WAITING] == zeros and set(samples[AGES].values()) == {0}
        assert samples[RECORDED] == {(("event_type", "GadgetCreated"),): events}
        names = {"GadgetCreated", *both, "pending", "failed", "succeeded"}
        for name, series in samples.items():  # every label is a name, never an id
            for key, value in (pair for labels in series for pair in labels):
                assert key in {"event_type", "handler", "result", "state", "le"}, (name, key)
                assert key == "le" or value in names, (name, key, value)
    finally:
        handling.close()
        fanout.close()


def test_an_sdk_reader_and_a_prometheus_registry_report_the_same_counts(dialect, one_shard):
    registry, telemetry, prom = registry_of([one_shard]), Telemetry(), CollectorRegistry()
    handlers = [RecordingHandler("receipts"), RecordingHandler("flaky", behaviour=fail_first)]
    clock = SettableClock(UtcClock().now() + timedelta(minutes=1))
    fanout, handling = jobs(registry, handlers, telemetry.options(prometheus_registry=prom), clock=clock)
    events = 4
    try:
        create_gadgets(registry, [one_shard], events)
        drain(fanout)
        drain(handling)
        points, samples = telemetry.points(), scrape(prom)
        [recorded] = points["ekbatan.events.recorded"]
        assert recorded.value == events == sample(samples, RECORDED, **recorded.attributes)
        for name in ("ekbatan.handler.duration", "ekbatan.event.delivery_lag"):
            prefix = f"{name.replace('.', '_')}_seconds"
            assert len(points[name]) == len(samples[f"{prefix}_count"])
            for point in points[name]:
                labels = dict(point.attributes)
                assert sample(samples, f"{prefix}_count", **labels) == point.count
                assert sample(samples, f"{prefix}_sum", **labels) == pytest.approx(point.sum)
                les = [*(repr(float(b)) for b in point.explicit_bounds), "+Inf"]
                buckets = dict(zip(les, accumulate(point.bucket_counts), strict=True))
                assert {le: sample(samples, f"{prefix}_bucket", **labels, le=le) for le in les} == buckets
        assert sample(samples, CALLS, handler="flaky", result="failed") == 1
        for name, prefix in (("ekbatan.notifications", WAITING), (OLDEST_AGE, AGES)):
            assert len(points[name]) == len(samples[prefix])
            for point in points[name]:
                assert sample(samples, prefix, **point.attributes) == pytest.approx(point.value)
        assert sample(samples, WAITING, handler="flaky", state="failed") == 1
    finally:
        handling.close()
        fanout.close()
