"""The local event handler pipeline: drain rate against the application's write rate, backlog
under concurrent writes, and latency from an action's commit to its handlers' start.

Every shard here is one throwaway database migrated with every contribution
(``ekbatan.core.migrate``: the eventlog tables and ``scheduled_tasks``), one table of the
benchmark's own (``bench_items``) and an action that inserts one row and records one event
(``BenchItemRecorded``). Three trivial handlers subscribe to that event, so each event is three
deliveries. The pipeline runs as in production: ``event_pipeline_jobs(config, ...)`` with the
default settings except ``handling.enabled`` (off by default: no node runs handlers unless it
opts in) — poll delay 1 s, fan-out batch 200, handling batch 100, wake-ups on, the fan-out
waking the handling job in-process — registered with a real ``JobRegistry`` (default poll
interval, heartbeats) on a jobs pool of its own, in a spawned process started, connected and
ready before it is released. The wake-ups-off baseline builds the same two jobs with the
builders and ``.wakeups(False)`` (keeping the in-process wake after a fan-out). Failed job
runs (the ``JobRegistry``'s ERROR lines) are counted in every case.

Cases:

* **writers** — 4 threads of one spawned process execute the action through an
  ``ActionExecutor`` (one shard) until N events are stored: events/s = actions/s. This is the
  pre-load of the next case and the baseline of its ratio.
* **drain** — on those N events, the pipeline process is released (``JobRegistry.start()``);
  t1 = every (event, handler) notification is ``SUCCEEDED``. deliveries/s = 3N / (t1 − t0);
  goal: deliveries/s ÷ (3 × writer events/s) ≥ 1.5. The time to the first delivery (the
  scheduler picking up the two jobs) is reported apart.
* **concurrent** — the pipeline runs while the writers write for a fixed time; the backlog
  (3 × undelivered events + open notifications, in deliveries) is sampled every 0.5 s. Bounded:
  its least-squares slope over the second half of the writing window is under 5 % of the arrival
  rate. After the writers stop, the time to an empty backlog.
* **latency** — the pipeline process idles with both jobs running; then ANOTHER process (the
  harness) executes 50 actions one by one, 0.25 s apart; each handler records ``time.time()``
  at its start, and the harness the time right after ``execute()`` returned. p50/p95 over every
  (event, handler) delivery. PostgreSQL (wake-ups on: the fan-out LISTENs for the action's
  ``pg_notify``; and off: both builders' ``.wakeups(False)``, the baseline), MariaDB, SQLite.
  Goals: p95 ≤ poll delay + 100 ms everywhere, ≤ 50 ms on PostgreSQL with wake-ups.

The throughput cases need a server (PostgreSQL, MariaDB); latency runs on all three.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.common import Settings, log, median, percentile, write_result
from bench.crew import start_crew
from bench.pipeline_app import (
    HANDLERS,
    WRITER_THREADS,
    Probe,
    app_registry,
    backlog,
    domain,
    executor_for,
    pipeline_database,
    pipeline_worker,
    report_of,
    wait_for_counts,
    writer_worker,
)

SAMPLE_EVERY = 0.5
BOUNDED_SLOPE = 0.05
RATIO_GOAL = 1.5


# ----------------------------------------------------------------------------- throughput
def drain_run(url: str, eventlog: str, events: int) -> dict[str, Any]:
    """Pre-load ``events`` by the writers (their rate), then drain them with the pipeline."""
    writers = start_crew(writer_worker, [(url, eventlog, {"count": events})])
    writers.release()
    w = report_of(writers, timeout=events / 20 + 120)
    if w.get("error") or w.get("errors"):
        raise RuntimeError(f"writers failed: {w}")
    writer_rate = w["actions"] / w["seconds"]
    log(f"pipeline writers: {w['actions']} actions in {w['seconds']:.1f} s = {writer_rate:.0f}/s")
    probe = Probe(url, eventlog)
    try:
        before = probe.counts()
        assert before["undelivered"] == w["actions"] + 1, before  # + the warm-up action
        expected = len(HANDLERS) * before["undelivered"]
        crew = start_crew(pipeline_worker, [(url, eventlog, {})])
        t0 = crew.release()
        t_first, _ = wait_for_counts(probe, lambda c: c["succeeded"] > 0, timeout=60, every=0.05)
        t1, after = wait_for_counts(probe, lambda c: c["succeeded"] >= expected, timeout=events / 20 + 300)
        [report] = crew.finish()
    finally:
        probe.close()
    seconds = t1 - t0
    deliveries = after["succeeded"]
    out = {
        "events": before["undelivered"],
        "deliveries": deliveries,
        "expected": expected,
        "complete": deliveries >= expected and after["open"] == 0,
        "writer_actions": w["actions"],
        "writer_seconds": round(w["seconds"], 2),
        "writer_events_per_s": round(writer_rate, 1),
        "writer_actions_per_s": round(writer_rate, 1),  # one event per action
        "drain_seconds": round(seconds, 2),
        "first_delivery_s": round(t_first - t0, 2),
        "deliveries_per_s": round(deliveries / seconds, 1),
        "events_per_s": round(deliveries / seconds / len(HANDLERS), 1),
        "deliveries_per_s_after_first": round(deliveries / max(t1 - t_first, 1e-6), 1),
        "ratio": round(deliveries / seconds / (len(HANDLERS) * writer_rate), 3),
        "job_failures": report.get("job_failures", []),
        "error": report.get("error"),
    }
    log(
        f"pipeline drain: {deliveries} deliveries in {seconds:.1f} s = {out['deliveries_per_s']:.0f}/s "
        f"(first after {out['first_delivery_s']} s); ratio to 3 × writers {out['ratio']:.2f}"
    )
    return out


def concurrent_run(url: str, eventlog: str, seconds: float) -> dict[str, Any]:
    """Writers and pipeline at once for ``seconds``; the backlog sampled every 0.5 s."""
    crew = start_crew(pipeline_worker, [(url, eventlog, {})])
    writers = start_crew(writer_worker, [(url, eventlog, {"seconds": seconds})])
    probe = Probe(url, eventlog)
    base = probe.counts()
    samples: list[dict[str, Any]] = []
    try:
        t0 = crew.release()
        writers.release()
        while True:
            now = time.perf_counter()
            c = probe.counts()
            samples.append({"t": round(now - t0, 2), "backlog": backlog(c), **c})
            if now - t0 >= seconds:
                break
            time.sleep(max(0.0, SAMPLE_EVERY - (time.perf_counter() - now)))
        w = report_of(writers, timeout=60)
        t_end = time.perf_counter()
        t1, after = wait_for_counts(probe, lambda c: backlog(c) == 0, timeout=300)
        samples.append({"t": round(t1 - t0, 2), "backlog": backlog(after), **after})
        [report] = crew.finish()
    finally:
        probe.close()
    writing = [s for s in samples if s["t"] <= seconds]
    half = [s for s in writing if s["t"] >= seconds / 2]
    slope = least_squares_slope([s["t"] for s in half], [s["backlog"] for s in half])
    written = writing[-1]["events"] - base["events"]
    arrivals = len(HANDLERS) * written / seconds
    delivered = writing[-1]["succeeded"] - base["succeeded"]
    out = {
        "seconds": seconds,
        "writer_actions": w.get("actions"),
        "writer_events_per_s": round(w["actions"] / w["seconds"], 1) if w.get("seconds") else None,
        "arrival_deliveries_per_s": round(arrivals, 1),
        "delivered_per_s_while_writing": round(delivered / seconds, 1),
        "backlog_max": max(s["backlog"] for s in writing),
        "backlog_end_of_writing": writing[-1]["backlog"],
        "backlog_median_second_half": median([s["backlog"] for s in half]),
        "backlog_slope_per_s": round(slope, 1) if slope is not None else None,
        "bounded": slope is not None and slope <= BOUNDED_SLOPE * arrivals,
        "drain_after_writers_s": round(t1 - t_end, 2),
        "complete": backlog(after) == 0,
        "samples": [(s["t"], s["backlog"], s["events"] - base["events"], s["succeeded"]) for s in samples],
        "job_failures": report.get("job_failures", []),
        "error": report.get("error") or (w.get("errors") or None),
    }
    log(
        f"pipeline concurrent {seconds:.0f} s: writers {out['writer_events_per_s']}/s, arrivals "
        f"{arrivals:.0f} deliveries/s, delivered {out['delivered_per_s_while_writing']}/s, backlog max "
        f"{out['backlog_max']} end {out['backlog_end_of_writing']} slope {out['backlog_slope_per_s']}/s "
        f"→ bounded {out['bounded']}; drained {out['drain_after_writers_s']} s after the writers"
    )
    return out


def least_squares_slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


# ----------------------------------------------------------------------------- latency
def latency_run(
    url: str,
    eventlog: str,
    dialect: str,
    *,
    wakeups: bool,
    actions: int,
    spacing: float,
    idle: float,
    processes: int = 1,
) -> dict[str, Any]:
    opts = {"record": True, "wakeups": wakeups}
    crew = start_crew(pipeline_worker, [(url, eventlog, opts)] * processes)
    probe = Probe(url, eventlog)
    registry = app_registry(url, eventlog, 2)
    executor = executor_for(registry)
    action = domain()["RecordItem"]()
    commits: dict[int, float] = {}
    try:
        crew.release()
        deadline = time.monotonic() + 30
        while probe.jobs_running() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        running = probe.jobs_running()
        time.sleep(idle)  # idle: both jobs are in their wait between empty rounds
        start = time.time()
        for i in range(actions):
            time.sleep(max(0.0, start + i * spacing - time.time()))
            executor.execute(action, {"seq": i})
            commits[i] = time.time()
        expected = len(HANDLERS) * actions
        _, after = wait_for_counts(probe, lambda c: c["succeeded"] >= expected, timeout=30, every=0.1)
        reports = crew.finish()
    finally:
        probe.close()
        for manager in registry.transaction_managers():
            manager.close()
    samples = [sample for r in reports for sample in r.get("samples", [])]
    lat = [t - commits[seq] for seq, _name, t in samples if seq in commits]
    first: dict[int, float] = {}
    for seq, _name, t in samples:
        if seq in commits:
            first[seq] = min(first.get(seq, t), t)
    first_lat = [t - commits[s] for s, t in first.items()]
    out = {
        "dialect": dialect,
        "wakeups": wakeups,
        "actions": actions,
        "jobs_running": running,
        "n": len(lat),
        "expected": len(HANDLERS) * actions,
        "left": len(HANDLERS) * actions - after["succeeded"],
        "p50_ms": _ms(percentile(lat, 50)),
        "p95_ms": _ms(percentile(lat, 95)),
        "min_ms": _ms(min(lat) if lat else None),
        "max_ms": _ms(max(lat) if lat else None),
        "first_handler_p95_ms": _ms(percentile(first_lat, 95)),
        "goal_ms": 50.0 if (dialect == "postgres" and wakeups) else 1100.0,
        "job_failures": [m for r in reports for m in r.get("job_failures", [])],
        "error": next((r["error"] for r in reports if r.get("error")), None),
    }
    log(
        f"pipeline latency {dialect} wakeups={wakeups}: p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms "
        f"(n={out['n']}/{out['expected']}, goal {out['goal_ms']} ms)"
    )
    return out


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


# ----------------------------------------------------------------------------- entry point
def run(settings: Settings) -> dict[str, Any]:
    events = settings.size(20_000, 5_000, 300)
    concurrent_s = float(settings.size(30, 15, 2))
    actions = settings.size(50, 30, 5)
    spacing = 0.25 if not settings.smoke else 0.1
    idle = 2.0 if not settings.smoke else 0.5
    results: dict[str, Any] = {
        "events": events,
        "handlers": len(HANDLERS),
        "writer_threads": WRITER_THREADS,
        "concurrent_seconds": concurrent_s,
        "latency_actions": actions,
        "latency_spacing_s": spacing,
        "ratio_goal": RATIO_GOAL,
        "repeats": settings.repeats,
        "dialects": {},
    }
    for dialect in ("postgres", "mariadb", "sqlite"):
        if not settings.wants(dialect):
            continue
        per: dict[str, Any] = {}
        if dialect != "sqlite":
            runs = []
            for _ in range(settings.repeats):
                with pipeline_database(dialect) as (url, eventlog):
                    runs.append(drain_run(url, eventlog, events))
            per["drain"] = _median_run(runs)
            with pipeline_database(dialect) as (url, eventlog):
                per["concurrent"] = concurrent_run(url, eventlog, concurrent_s)
        rows = []
        for wakeups in (True, False) if dialect == "postgres" else (True,):
            with pipeline_database(dialect) as (url, eventlog):
                rows.append(
                    latency_run(
                        url, eventlog, dialect, wakeups=wakeups, actions=actions, spacing=spacing, idle=idle
                    )
                )
        per["latency"] = rows
        results["dialects"][dialect] = per
    write_result(settings, "pipeline", results)
    return results


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median ratio, every run's figures under ``runs``."""
    if len(runs) == 1:
        return {**runs[0], "runs": [_brief(runs[0])]}
    ordered = sorted(runs, key=lambda r: r["ratio"])
    return {**ordered[len(ordered) // 2], "runs": [_brief(r) for r in runs]}


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("writer_events_per_s", "deliveries_per_s", "ratio", "drain_seconds", "first_delivery_s")
    return {k: r.get(k) for k in keys}


# ----------------------------------------------------------------------------- profile (by hand)
def profile_drain(dialect: str = "postgres", events: int = 5_000, top: int = 25) -> dict[str, Any]:
    """Where one process's time goes while draining: ``python -c "from bench.pipeline import
    profile_drain; profile_drain('postgres')"``. Not part of ``run``: the jobs' rounds are called
    directly (no scheduler, no wake-ups), the fan-out first until done, then the handling job,
    each under cProfile, with the wall time of each step of a handling round measured apart."""
    import cProfile
    import pstats

    from ekbatan.core.config import LocalEventHandlerConfig
    from ekbatan.local_event_handler import EventHandlerRegistry, event_pipeline_jobs

    out: dict[str, Any] = {"dialect": dialect, "events": events}
    with pipeline_database(dialect) as (url, eventlog):
        writers = start_crew(writer_worker, [(url, eventlog, {"count": events})])
        writers.release()
        report_of(writers, timeout=events / 20 + 120)
        handlers = (
            EventHandlerRegistry.builder()
            .with_handlers([domain()["TrivialHandler"](name, None) for name in HANDLERS])
            .build()
        )
        registry = app_registry(url, eventlog, 10)
        config = LocalEventHandlerConfig.model_validate({"handling": {"enabled": True}})
        fanout, handling = event_pipeline_jobs(
            config, database_registry=registry, event_handler_registry=handlers
        )
        steps: dict[str, float] = {"invoke": 0.0, "record": 0.0}
        original_invoke, original_record = handling._invoke, handling._record

        def invoke(rows: Any) -> Any:
            t = time.perf_counter()
            try:
                return original_invoke(rows)
            finally:
                steps["invoke"] += time.perf_counter() - t

        def record(*args: Any) -> Any:
            t = time.perf_counter()
            try:
                return original_record(*args)
            finally:
                steps["record"] += time.perf_counter() - t

        handling._invoke, handling._record = invoke, record
        for name, job in (("fanout", fanout), ("handling", handling)):
            # half of the rounds without the profiler (wall time per step), then the rest under it
            plain = (events if name == "fanout" else len(HANDLERS) * events) // (2 * job.batch_size)
            t0 = time.perf_counter()
            for _ in range(plain):
                job.drain_one_round()
            wall = time.perf_counter() - t0
            out[name] = {
                "rounds": plain,
                "wall_s": round(wall, 3),
                "ms_per_round": round(1000 * wall / plain, 2),
            }
            if name == "handling":
                other = wall - steps["invoke"] - steps["record"]
                out[name]["ms_per_round_by_step"] = {
                    "select_and_decode": round(1000 * other / plain, 2),
                    "invoke_handlers": round(1000 * steps["invoke"] / plain, 2),
                    "record_outcomes": round(1000 * steps["record"] / plain, 2),
                }
            profiler = cProfile.Profile()
            profiler.enable()
            while job.drain_one_round():
                pass
            profiler.disable()
            stats = pstats.Stats(profiler)
            print(f"--- {name}: {out[name]}")
            stats.sort_stats("cumulative").print_stats(top)
            stats.sort_stats("tottime").print_stats(top)
        fanout.close()
        handling.close()
        for manager in registry.transaction_managers():
            manager.close()
    print(out)
    return out
