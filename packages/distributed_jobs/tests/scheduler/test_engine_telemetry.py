"""OpenTelemetry metrics and traces of the engine on every dialect, recorded by the real SDK
into in-memory readers: each run counted once with its result, lag and duration as the clock
says, the gauges read from the table, a span per run around its body; nothing labelled by
instance id; nothing built when telemetry is off."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ekbatan.distributed_jobs.scheduler import (
    CancelDeadExecution,
    FailureHandlers,
    Scheduler,
    SchedulerClient,
    Tasks,
)
from testsupport import wait_until

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


class Boom(ValueError):
    pass


def fail(instance, ctx) -> None:
    raise Boom(f"bad input {instance.data}")


OK = Tasks.one_time("ok").execute(lambda instance, ctx: None)
FLAKY = (
    Tasks.one_time("flaky")
    .on_failure(FailureHandlers.max_retries(1).retry_every(timedelta(minutes=1)).then_dead_letter())
    .execute(fail)
)


class Telemetry:
    """A meter provider and a tracer provider of the real SDK, read in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def metrics(self) -> dict[str, list[Any]]:
        """Each metric's data points, by name."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def values(self, name: str, *keys: str) -> dict[tuple[str, ...], Any]:
        """A counter's or gauge's values (a histogram's counts) by the given attributes."""
        out: dict[tuple[str, ...], Any] = {}
        for point in self.metrics().get(name, []):
            key = tuple(point.attributes[k] for k in keys)
            out[key] = point.count if hasattr(point, "bucket_counts") else point.value
        return out

    def histogram(self, name: str, **attributes: str) -> Any:
        [point] = [
            p for p in self.metrics()[name] if all(p.attributes.get(k) == v for k, v in attributes.items())
        ]
        return point


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


@pytest.fixture
def client(engine, clock) -> SchedulerClient:
    return SchedulerClient(engine, clock=clock)


def build(engine, clock, telemetry: Telemetry, *tasks, **options) -> Scheduler:
    return (
        Scheduler.create(engine, *tasks)
        .clock(clock)
        .failure_logging("OFF")
        .telemetry(
            meter_provider=telemetry.meter_provider, tracer_provider=telemetry.tracer_provider, **options
        )
        .build()
    )


# --------------------------------------------------------------------------- runs
def test_each_run_is_counted_once_with_its_result_lag_and_duration(engine, clock, built, client, telemetry):
    scheduler = build(engine, clock, telemetry, OK, FLAKY)
    built.append(scheduler)
    for n in range(3):
        client.schedule(OK.instance(f"o{n}"), T0)
    client.schedule(FLAKY.instance("f1", 7), T0 + timedelta(seconds=20))
    clock.advance(timedelta(seconds=30))
    assert scheduler.run_any_due_executions() == 4  # three succeed, f1 fails (retried in a minute)
    clock.advance(timedelta(minutes=1, seconds=5))
    assert scheduler.run_any_due_executions() == 1  # f1 fails again: dead

    assert telemetry.values("ekbatan.executions", "task", "result") == {
        ("ok", "succeeded"): 3,
        ("flaky", "failed"): 1,
        ("flaky", "dead"): 1,
    }
    # lag: start minus due time, on the scheduler's clock (it does not move during a run here)
    ok_lag = telemetry.histogram("ekbatan.execution.lag", task="ok")
    assert (ok_lag.count, ok_lag.sum) == (3, 3 * 30.0)
    flaky_lag = telemetry.histogram("ekbatan.execution.lag", task="flaky")
    assert (flaky_lag.count, flaky_lag.sum) == (2, 10.0 + 5.0)
    duration = telemetry.histogram("ekbatan.execution.duration", task="ok", result="succeeded")
    assert (duration.count, duration.sum) == (3, 0.0)
    assert set(telemetry.values("ekbatan.execution.duration", "task", "result")) == {
        ("ok", "succeeded"),
        ("flaky", "failed"),
        ("flaky", "dead"),
    }


def test_durations_and_lag_on_the_system_clock_are_plausible(engine, built, client, telemetry):
    started = threading.Event()

    def slowish(instance, ctx) -> None:
        started.set()
        threading.Event().wait(0.05)

    task = Tasks.one_time("slowish").execute(slowish)
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=100))
        .telemetry(meter_provider=telemetry.meter_provider, tracer_provider=telemetry.tracer_provider)
        .build()
    )
    built.append(scheduler)
    scheduler.start()
    due = datetime.now(UTC) - timedelta(seconds=2)
    SchedulerClient(engine).schedule(task.instance("a"), due)
    wait_until(lambda: telemetry.values("ekbatan.executions", "task") == {("slowish",): 1}, timeout=20)
    duration = telemetry.histogram("ekbatan.execution.duration", task="slowish", result="succeeded")
    assert 0.05 <= duration.sum < 10
    lag = telemetry.histogram("ekbatan.execution.lag", task="slowish")
    assert 2.0 <= lag.sum < 20
    # the polls of a started scheduler are timed and their finds counted
    polls = telemetry.histogram("ekbatan.poll.duration")
    assert polls.count >= 1 and 0 < polls.sum < 60
    assert sum(telemetry.values("ekbatan.poll.claimed", "via").values()) >= 1


def test_dead_executions_are_counted_revived_or_abandoned(engine, clock, built, client, telemetry):
    fragile = Tasks.one_time("fragile").on_dead_execution(CancelDeadExecution()).execute(lambda i, c: None)
    scheduler = build(engine, clock, telemetry, OK, fragile)
    built.append(scheduler)
    for task in (OK, fragile):
        client.schedule(task.instance("x"), T0)
        execution = client.get_scheduled_execution((task.name, "x")).execution
        client.repository.pick(execution, clock.now())  # a worker that then vanished
    clock.advance(timedelta(hours=1))
    scheduler.run_dead_execution_detection()
    assert telemetry.values("ekbatan.executions", "task", "result") == {
        ("ok", "revived"): 1,
        ("fragile", "abandoned"): 1,
    }
    assert telemetry.values("ekbatan.dead_executions.revived", "task") == {("ok",): 1, ("fragile",): 1}


# --------------------------------------------------------------------------- gauges
def test_the_gauges_read_the_table_per_task(engine, clock, built, client, telemetry):
    paused_task = Tasks.one_time("paused-task").execute(lambda i, c: None)
    scheduler = build(engine, clock, telemetry, OK, FLAKY, paused_task, gauge_interval=timedelta(hours=1))
    built.append(scheduler)
    for n in range(3):
        client.schedule(OK.instance(f"due{n}"), T0 - timedelta(minutes=n))
    client.schedule(OK.instance("later"), T0 + timedelta(hours=1))
    client.schedule(OK.instance("running"), T0)
    client.repository.pick(client.get_scheduled_execution(("ok", "running")).execution, clock.now())
    client.schedule(FLAKY.instance("f1"), T0 + timedelta(days=1))
    client.repository.reschedule(
        client.get_scheduled_execution(("flaky", "f1")).execution,
        T0 + timedelta(days=1),
        last_success=None,
        last_failure=T0,
        consecutive_failures=2,
    )
    client.schedule(FLAKY.instance("f2"), T0 + timedelta(days=1))
    client.pause_execution(("flaky", "f2"))
    for n in range(2):
        client.schedule(paused_task.instance(f"p{n}"), T0)
    client.pause_task("paused-task")

    by_task = {
        name: telemetry.values(name, "task")
        for name in ("ekbatan.due", "ekbatan.running", "ekbatan.failing", "ekbatan.paused", "ekbatan.dead")
    }
    assert by_task["ekbatan.due"] == {("ok",): 3, ("flaky",): 0, ("paused-task",): 2}
    assert by_task["ekbatan.running"] == {("ok",): 1, ("flaky",): 0, ("paused-task",): 0}
    assert by_task["ekbatan.failing"] == {("ok",): 0, ("flaky",): 1, ("paused-task",): 0}
    assert by_task["ekbatan.paused"] == {("ok",): 0, ("flaky",): 1, ("paused-task",): 2}
    assert by_task["ekbatan.dead"] == {("ok",): 0, ("flaky",): 0, ("paused-task",): 0}
    # the oldest due "ok" was due two minutes before T0 ("running" was due at T0, but is picked)
    assert telemetry.values("ekbatan.oldest_due_age", "task")[("ok",)] == pytest.approx(120.0)

    # read at most once per interval: a change shows only once it has passed
    client.schedule(OK.instance("due-later"), T0)
    assert telemetry.values("ekbatan.due", "task")[("ok",)] == 3
    scheduler.telemetry.gauges.interval = 0.0
    assert telemetry.values("ekbatan.due", "task")[("ok",)] == 4


def test_dead_letters_show_in_the_dead_gauge(engine, clock, built, client, telemetry):
    scheduler = build(engine, clock, telemetry, FLAKY, gauge_interval=timedelta(milliseconds=1))
    built.append(scheduler)
    client.schedule(FLAKY.instance("f1"), T0)
    scheduler.run_any_due_executions()
    clock.advance(timedelta(minutes=1))
    scheduler.run_any_due_executions()
    wait_until(lambda: telemetry.values("ekbatan.dead", "task") == {("flaky",): 1}, timeout=5)


# --------------------------------------------------------------------------- traces
def test_each_run_is_a_consumer_span_around_its_body(engine, clock, built, client, telemetry):
    inside: list[Any] = []

    def body(instance, ctx) -> None:
        inside.append(trace.get_current_span().get_span_context())
        if instance.id == "bad":
            raise Boom("no")

    task = Tasks.one_time("traced").execute(body)
    scheduler = build(engine, clock, telemetry, task)
    built.append(scheduler)
    client.schedule(task.instance("good"), T0)
    client.schedule(task.instance("bad"), T0)
    assert scheduler.run_any_due_executions() == 2

    spans = {span.attributes["ekbatan.instance"]: span for span in telemetry.spans.get_finished_spans()}
    assert set(spans) == {"good", "bad"}
    good, bad = spans["good"], spans["bad"]
    assert good.name == "process traced" and good.kind is SpanKind.CONSUMER
    assert {k: good.attributes[k] for k in ("messaging.system", "messaging.destination.name")} == {
        "messaging.system": "ekbatan",
        "messaging.destination.name": "traced",
    }
    assert good.attributes["ekbatan.result"] == "succeeded" and good.attributes["ekbatan.attempt"] == 1
    assert good.attributes["ekbatan.fencing_token"] == 2  # inserted 1, claimed 2
    assert good.status.status_code is StatusCode.UNSET
    assert bad.attributes["ekbatan.result"] == "failed" and bad.status.status_code is StatusCode.ERROR
    [event] = bad.events
    assert event.name == "exception" and event.attributes["exception.type"].endswith("Boom")
    # the body ran with the run's span current: what it calls is traced as its children
    assert {c.span_id for c in inside} == {good.context.span_id, bad.context.span_id}


# --------------------------------------------------------------------------- the contract
def test_no_metric_is_labelled_by_instance(engine, clock, built, client, telemetry):
    scheduler = build(engine, clock, telemetry, OK, FLAKY, semantic_conventions=True)
    built.append(scheduler)
    client.schedule(OK.instance("order-1"), T0)
    client.schedule(FLAKY.instance("order-2"), T0)
    scheduler.run_any_due_executions()
    metrics = telemetry.metrics()
    assert "messaging.process.duration" in metrics
    for name, points in metrics.items():
        for point in points:
            values = set(point.attributes.values())
            assert not values & {"order-1", "order-2"}, (name, point.attributes)
            assert not any("instance" in key for key in point.attributes), (name, point.attributes)


def test_nothing_is_built_when_telemetry_is_off(engine, clock, built):
    scheduler = Scheduler.create(engine, OK).clock(clock).build()
    built.append(scheduler)
    assert scheduler.telemetry is None and scheduler.metrics is None
    assert not any(type(i).__name__ == "ExecutionTracing" for i in scheduler.runner.interceptors)


def test_nothing_is_built_while_no_sdk_is_installed(engine, clock, built, caplog):
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    # what OpenTelemetry's global providers are before an application installs an SDK: the
    # API's own (given here: another test in this process may have installed an SDK globally)
    no_sdk = {"meter_provider": NoOpMeterProvider(), "tracer_provider": NoOpTracerProvider()}
    with caplog.at_level("INFO", logger="ekbatan.distributed_jobs.scheduler.telemetry"):
        scheduler = Scheduler.create(engine, OK).clock(clock).telemetry(**no_sdk).build()
    built.append(scheduler)
    assert scheduler.metrics is None and scheduler.telemetry.gauges is None
    assert scheduler.telemetry.interceptor is None and scheduler.client._schedule_tracing is None
    assert not any(type(i).__name__ == "ExecutionTracing" for i in scheduler.runner.interceptors)
    assert "no OpenTelemetry SDK meter provider is installed" in caplog.text
    assert "no OpenTelemetry SDK tracer provider is installed" in caplog.text


def test_telemetry_without_the_opentelemetry_api_says_what_to_install(engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'ekbatan-distributed-jobs\[otel\]'"):
        Scheduler.create(engine, OK).telemetry()
    with pytest.raises(ValueError, match="gauge_interval must be positive"):
        monkeypatch.delitem(sys.modules, "opentelemetry.metrics")
        Scheduler.create(engine, OK).telemetry(gauge_interval=timedelta(0))


def test_an_async_body_runs_inside_its_runs_span_too(engine, clock, built, client, telemetry):
    inside: list[Any] = []

    async def body(instance, ctx) -> None:
        inside.append(trace.get_current_span().get_span_context())

    task = Tasks.one_time("traced-async").execute(body)
    scheduler = build(engine, clock, telemetry, task)
    built.append(scheduler)
    client.schedule(task.instance("a"), T0)
    assert scheduler.run_any_due_executions() == 1
    [span] = telemetry.spans.get_finished_spans()
    assert [c.span_id for c in inside] == [span.context.span_id]


# --------------------------------------------------------------------------- schedule → run
def traced_scheduler(engine, clock, telemetry: Telemetry, task, **options) -> Scheduler:
    return build(engine, clock, telemetry, task, metrics=False, **options)


def test_a_run_links_to_the_span_of_the_schedule_call_that_made_it(engine, clock, built, telemetry):
    task = Tasks.one_time("linked").execute(lambda i, c: None)
    scheduler = traced_scheduler(engine, clock, telemetry, task)
    built.append(scheduler)
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("http request") as request:
        scheduler.schedule(task.instance("a"), T0)
    scheduler.schedule(task.instance("untraced"), T0)  # no span around it: nothing kept
    assert scheduler.run_any_due_executions() == 2

    spans = telemetry.spans.get_finished_spans()
    [send] = [s for s in spans if s.kind is SpanKind.PRODUCER]
    assert send.name == "send linked" and send.parent.span_id == request.get_span_context().span_id
    assert send.attributes["messaging.destination.name"] == "linked"
    runs = {s.attributes["ekbatan.instance"]: s for s in spans if s.kind is SpanKind.CONSUMER}
    [link] = runs["a"].links
    assert (link.context.trace_id, link.context.span_id) == (send.context.trace_id, send.context.span_id)
    assert runs["a"].context.trace_id != send.context.trace_id  # a trace of its own, linked
    assert runs["untraced"].links == ()
    # taken by the run: nothing left behind
    assert scalar(engine, "SELECT COUNT(*) FROM scheduled_tasks_traces") == 0


def test_a_run_is_the_child_of_its_schedule_call_when_asked(engine, clock, built, telemetry):
    task = Tasks.one_time("child").execute(lambda i, c: None)
    scheduler = traced_scheduler(engine, clock, telemetry, task, schedule_context="parent")
    built.append(scheduler)
    with telemetry.tracer_provider.get_tracer("app").start_as_current_span("http request"):
        scheduler.schedule_batch([task.instance("a"), task.instance("b")], T0)
    assert scheduler.run_any_due_executions() == 2
    spans = telemetry.spans.get_finished_spans()
    [send] = [s for s in spans if s.kind is SpanKind.PRODUCER]
    assert send.name == "send child" and send.attributes["messaging.batch.message_count"] == 2
    runs = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert len(runs) == 2
    for run in runs:
        assert run.parent.span_id == send.context.span_id and run.context.trace_id == send.context.trace_id


def test_a_rolled_back_schedule_keeps_no_trace_context_and_the_row_is_as_java_reads_it(
    engine, clock, built, telemetry
):
    task = Tasks.one_time("tx").execute(lambda i, c: None)
    scheduler = traced_scheduler(engine, clock, telemetry, task)
    built.append(scheduler)
    untraced = SchedulerClient(engine, [task], clock=clock)
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        with pytest.raises(RuntimeError), engine.begin() as conn:
            scheduler.schedule(task.instance("gone"), T0, connection=conn)
            raise RuntimeError("the caller's transaction fails")
        scheduler.schedule(task.instance("traced", {"n": 1}), T0)
    untraced.schedule(task.instance("plain", {"n": 1}), T0)
    assert scalar(engine, "SELECT COUNT(*) FROM scheduled_tasks_traces") == 1
    # scheduled_tasks holds the same bytes with tracing as without: nothing for Java to trip on
    rows = {
        r[0]: r[1:]
        for r in run_sql(engine, "SELECT task_instance, task_data, version, picked FROM scheduled_tasks")
    }
    assert set(rows) == {"traced", "plain"} and rows["traced"] == rows["plain"]


def test_a_schedule_from_another_process_is_linked_from_the_run(engine, database, clock, built, telemetry):
    import json
    import subprocess

    task = Tasks.one_time("remote").execute(lambda i, c: None)
    scheduler = traced_scheduler(engine, clock, telemetry, task)
    built.append(scheduler)
    producer = f"""
import json
from datetime import datetime
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance
provider = TracerProvider()
client = SchedulerClient(sa.create_engine({database.url!r}), tracing=True, tracer_provider=provider)
with provider.get_tracer("producer").start_as_current_span("checkout") as span:
    client.schedule(TaskInstance("remote", "order-1"), datetime.fromisoformat({T0.isoformat()!r}))
context = span.get_span_context()
print(json.dumps({{"trace_id": context.trace_id}}))
"""
    done = subprocess.run([sys.executable, "-c", producer], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    trace_id = json.loads(done.stdout)["trace_id"]
    wait_until(lambda: scheduler.run_any_due_executions() == 1, timeout=10)
    [run] = telemetry.spans.get_finished_spans()
    [link] = run.links
    assert link.context.trace_id == trace_id  # the producer's PRODUCER span, in its trace


def test_runs_of_task_names_with_no_stored_context_read_nothing_more(engine, clock, built, telemetry):
    from sqlalchemy import event

    task = Tasks.one_time("quiet").execute(lambda i, c: None)
    scheduler = traced_scheduler(engine, clock, telemetry, task)
    built.append(scheduler)
    for n in range(5):
        scheduler.schedule(task.instance(f"q{n}"), T0)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *a: statements.append(sql))
    assert scheduler.run_any_due_executions() == 5
    reads = [s for s in statements if "scheduled_tasks_traces" in s]
    assert len(reads) <= 1, reads  # the names with stored contexts, read once; no lookup per run
    assert not any("DELETE" in s for s in reads)


def scalar(engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.exec_driver_sql(sql).scalar()


def run_sql(engine, sql: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.exec_driver_sql(sql))


# --------------------------------------------------------------------------- Prometheus
def scrape(registry: Any) -> dict[str, Any]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    return {
        family.name: family for family in text_string_to_metric_families(generate_latest(registry).decode())
    }


def test_a_prometheus_registry_serves_the_same_names_as_opentelemetrys_exporter(engine, clock, built, client):
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    native, exported = CollectorRegistry(), CollectorRegistry()
    sdk = MeterProvider(metric_readers=[PrometheusMetricReader(registry=exported, disable_target_info=True)])
    for n, registry in enumerate((native, exported)):
        task = Tasks.one_time(f"job-{n}").execute(fail if n else (lambda i, c: None))
        options = {"prometheus_registry": registry} if registry is native else {"meter_provider": sdk}
        scheduler = (
            Scheduler.create(engine, task).clock(clock).failure_logging("OFF").telemetry(**options).build()
        )
        built.append(scheduler)
        for k in range(3):
            client.schedule(task.instance(f"order-{k}"), T0 - timedelta(seconds=5))
        assert scheduler.run_any_due_executions() == 3
    ours, theirs = scrape(native), scrape(exported)
    ekbatan = sorted(name for name in theirs if name.startswith("ekbatan"))
    assert sorted(ours) == ekbatan  # dashboards work with either
    assert {"ekbatan_executions", "ekbatan_execution_duration_seconds", "ekbatan_due"} <= set(ours)
    for family in (ours["ekbatan_executions"], theirs["ekbatan_executions"]):
        assert family.type == "counter"
    samples = {
        (s.name, s.labels.get("task"), s.labels.get("result")): s.value
        for s in ours["ekbatan_executions"].samples
    }
    assert samples[("ekbatan_executions_total", "job-0", "succeeded")] == 3
    lag = {s.name: s.value for s in ours["ekbatan_execution_lag_seconds"].samples}
    assert (lag["ekbatan_execution_lag_seconds_count"], lag["ekbatan_execution_lag_seconds_sum"]) == (3, 15.0)
    bucket = [s for s in ours["ekbatan_execution_lag_seconds"].samples if s.labels.get("le") == "5.0"]
    assert bucket[0].value == 3  # each lag was 5 s exactly: counted in le="5.0", as Prometheus counts
    due = {s.labels["task"]: s.value for s in ours["ekbatan_due"].samples}
    # read from the table: job-0's runs succeeded and left it; job-1's failed and wait for a retry
    assert due == {"job-1": 0}
    for family in ours.values():
        for sample in family.samples:
            assert not any(v.startswith("order-") for v in sample.labels.values()), sample


def test_a_stopped_scheduler_is_no_longer_served(engine, clock, built):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    scheduler = Scheduler.create(engine, OK).clock(clock).telemetry(prometheus_registry=registry).build()
    SchedulerClient(engine, clock=clock).schedule(OK.instance("a"), T0)
    assert scheduler.run_any_due_executions() == 1
    assert "ekbatan_executions" in scrape(registry)
    scheduler.stop()
    assert not [name for name in scrape(registry) if name.startswith("ekbatan")]
