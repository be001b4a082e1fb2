"""One scheduler in a worker process: what throughput, latency, scale and footprint start.

``scheduler_worker(pipe, go, stop, url, opts)`` runs in a spawned process. It imports the
engine, builds the scheduler, opens its connections and reports ``ready``; on ``go`` it
starts the scheduler (and, in the ``latency_local`` mode, schedules tasks through it); on
``stop`` it stops the scheduler and sends one report.

``opts`` (all optional):

* ``name`` — scheduler name; ``threads`` (10); ``strategy`` — ``fetch`` | ``lock_and_fetch`` |
  ``default`` (no ``poll_using_…`` call: the engine chooses, as out of the box);
  ``fractions`` — (lower, upper) limit fractions of the strategy (its defaults otherwise);
  ``strict`` — ``batch_completions(False)``; ``polling`` — seconds (10); ``listen`` — PG
  LISTEN/NOTIFY wake-ups (True); ``pool_size`` — connections (``min(threads + 2, 16)``);
* ``history`` — ``execution_history()`` on (every run recorded in ``scheduled_tasks_history``);
* ``body`` — ``noop`` (default) or ``record`` (the task data holds ``{"due": epoch}``; the
  body records ``time.time() - due``);
* ``count_statements`` — count every statement the engine sends through SQLAlchemy;
* ``mode`` — ``run`` (default) or ``latency_local``: after ``go`` and ``idle_first`` seconds,
  schedule ``tasks`` instances through this scheduler, instance *i* due at
  ``first_due + i * spacing`` seconds after scheduling began.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any


def build_scheduler(
    engine: Any, opts: dict[str, Any], samples: list[tuple[str, float]], executed: Any
) -> Any:
    from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks

    if opts.get("body", "noop") == "record":

        def body(instance: Any, ctx: Any) -> None:
            started = time.time()
            next(executed)
            samples.append((instance.id, started - float(instance.data["due"])))

        task = Tasks.one_time("bench", dict).execute(body)
    else:

        def body(instance: Any, ctx: Any) -> None:
            next(executed)

        task = Tasks.one_time("bench").execute(body)

    builder = (
        Scheduler.create(engine, task)
        .threads(int(opts.get("threads", 10)))
        .polling_interval(timedelta(seconds=float(opts.get("polling", 10))))
        .scheduler_name(str(opts.get("name", "bench")))
        .shutdown_max_wait(timedelta(seconds=float(opts.get("shutdown_max_wait", 10))))
        .batch_completions(not opts.get("strict", False))
        .listen_for_notifications(bool(opts.get("listen", True)))
    )
    if opts.get("history"):
        builder = builder.execution_history()  # every run recorded in scheduled_tasks_history
    telemetry = opts.get("telemetry")
    if telemetry == "api":
        builder = builder.telemetry()  # OpenTelemetry's global providers: no SDK installed
    elif telemetry == "prometheus":
        from prometheus_client import REGISTRY

        # served by prometheus_client from the process's own counters: no SDK
        builder = builder.telemetry(prometheus_registry=REGISTRY)
    elif telemetry in ("metrics", "full"):
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider

        # the SDK recording every metric for a Prometheus reader (a scraper thread collects as a
        # Prometheus server would); "full" also makes every run's span (sampled, exported nowhere)
        builder = builder.telemetry(
            meter_provider=MeterProvider(metric_readers=[PrometheusMetricReader()]),
            tracer_provider=TracerProvider() if telemetry == "full" else None,
        )
    fractions = opts.get("fractions")  # (lower, upper) of the strategy, else its defaults
    strategy = opts.get("strategy", "fetch")
    if strategy == "lock_and_fetch":
        builder = builder.poll_using_lock_and_fetch(*(fractions or ()))
    elif strategy != "default":
        builder = builder.poll_using_fetch(*(fractions or ()))
    return builder.build(), task


def scheduler_worker(pipe: Any, go: Any, stop: Any, url: str, opts: dict[str, Any]) -> None:
    from sqlalchemy import event

    from bench.common import pooled_engine, rss_kb

    threads = int(opts.get("threads", 10))
    pool_size = int(opts.get("pool_size") or min(threads + 2, 16))
    engine = pooled_engine(url, pool_size)
    statements = itertools.count()
    statement_count = [0]
    if opts.get("count_statements"):

        def counted(*_args: Any) -> None:
            next(statements)

        event.listen(engine, "before_cursor_execute", counted)
        # The pool's liveness pings bypass the statement events; they are queries all the same.
        ping = engine.dialect.do_ping

        def counted_ping(dbapi_connection: Any) -> bool:
            next(statements)
            return ping(dbapi_connection)

        engine.dialect.do_ping = counted_ping  # type: ignore[method-assign]
    samples: list[tuple[str, float]] = []
    executed = itertools.count()
    try:
        scheduler, task = build_scheduler(engine, opts, samples, executed)
        # open the pool's connections now: start-up is not what is measured
        if not url.startswith("sqlite"):
            held = [engine.connect() for _ in range(pool_size if opts.get("warm_pool", True) else 1)]
            for c in held:
                c.close()
        else:
            with engine.connect():
                pass
    except BaseException as exc:
        pipe.send({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
        raise
    pipe.send({"event": "ready", "rss_kb": rss_kb()})
    go.wait()
    started = time.perf_counter()
    scheduler.start()
    if opts.get("telemetry") in ("prometheus", "metrics", "full"):
        threading.Thread(
            target=_scrape_until, args=(stop, float(opts.get("scrape_every", 5))), daemon=True
        ).start()
    scheduled_self = 0
    if opts.get("mode") == "latency_local":
        stop.wait(float(opts.get("idle_first", 1.0)))
        n = int(opts.get("tasks", 50))
        spacing = float(opts.get("spacing", 0.5))
        first = float(opts.get("first_due", 2.0))
        began = time.time()
        for i in range(n):
            due = began + first + i * spacing
            when = datetime.fromtimestamp(due, UTC)
            scheduler.schedule(task.instance(f"l{i}", {"due": due}), when)
            scheduled_self += 1
    stop.wait()
    statement_count[0] = next(statements)
    rss_before_stop = rss_kb()
    stopped_at = time.perf_counter()
    scheduler.stop()
    engine.dispose()
    pipe.send(
        {
            "event": "report",
            "executed": next(executed),
            "samples": samples,
            "statements": statement_count[0],
            "running_s": stopped_at - started,
            "rss_kb": rss_before_stop,
            "threads_alive": threading.active_count(),
            "scheduled_self": scheduled_self,
            # history rows written and given up, when execution history is on
            "history": None
            if scheduler.execution_history is None or scheduler.execution_history.writer is None
            else {
                "written": scheduler.execution_history.writer.written_rows,
                "failed": scheduler.execution_history.writer.failed_rows,
            },
        }
    )
    pipe.close()


def _scrape_until(stop: Any, every: float) -> None:
    """Collect the metrics as a Prometheus server scraping ``/metrics`` would, until ``stop``."""
    from prometheus_client import REGISTRY, generate_latest

    while not stop.wait(every):
        generate_latest(REGISTRY)
