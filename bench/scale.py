"""Scale: does a big table of future executions slow the poll down?

For F future rows (10 k, then 1 M; due over the next 30 days, loaded server-side), on
PostgreSQL and MariaDB:

* poll query time — the engine's own statements through its repository, each timed 200
  times (median, ms): the fetch poll (``get_due``, limit 30 = 3 × 10 threads) with nothing
  due and with 100 rows due, the lock-and-fetch claim with nothing due, and the next-due-time
  query (``MIN(execution_time)`` of the future rows);
* executions/s — 20 k due rows added on top of the F future rows, drained by 4 scheduler
  processes (threads 10) with each strategy, as in the throughput benchmark.

The ratio 1 M / 10 k is the figure (goal: poll cost ≤ 1.5 ×). Then 100 k rows due at once (with
10 k future rows): executions/s against the 20 k figure.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import (
    Settings,
    analyze,
    create_scheduler_table,
    load_rows,
    log,
    median,
    ratio,
    scratch_database,
    truncate,
    write_result,
)
from bench.throughput import run_once


def _repository(url: str) -> tuple[Any, sa.Engine]:
    from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks

    engine = sa.create_engine(url, pool_size=2, max_overflow=0)
    task = Tasks.one_time("bench").execute(lambda i, c: None)
    scheduler = Scheduler.create(engine, task).threads(10).scheduler_name("bench-scale").build()
    return scheduler.repository, engine


def time_queries(url: str, calls: int) -> dict[str, float | None]:
    """Median milliseconds of each poll statement (rows due now are left untouched)."""
    repo, engine = _repository(url)
    try:
        now = datetime.now(UTC)

        def timed(fn: Any) -> float | None:
            fn()  # warm (plans, pool)
            samples = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1000)
            return round(median(samples), 3)

        out = {
            "get_due_empty_ms": timed(lambda: repo.get_due(now - timedelta(days=1), 30)),
            "next_due_ms": timed(lambda: repo.next_execution_time(now)),
            "get_due_100_due_ms": None,
        }
        if repo.dialect.supports_lock_and_fetch:
            out["lock_and_fetch_empty_ms"] = timed(lambda: repo.lock_and_fetch(now - timedelta(days=1), 10))
        load_rows(url, 100, prefix="d")
        analyze(url)
        out["get_due_100_due_ms"] = timed(lambda: repo.get_due(datetime.now(UTC), 30))
        return out
    finally:
        engine.dispose()


def _delete_prefix(url: str, prefix: str) -> None:
    from bench.common import raw_connect

    conn = raw_connect(url)
    try:
        conn.cursor().execute(
            f"DELETE FROM scheduled_tasks WHERE task_name = 'bench' AND task_instance LIKE '{prefix}%'"
        )
    finally:
        conn.close()


def run(settings: Settings) -> dict[str, Any]:
    small, big = (10_000, 1_000_000) if not settings.quick else (10_000, 200_000)
    if settings.smoke:
        small, big = 200, 2_000
    due_n = settings.size(20_000, 5_000, 200)
    burst = settings.size(100_000, 20_000, 400)
    calls = settings.size(200, 100, 5)
    repeats = 1 if settings.smoke else settings.repeats
    strategies = ("fetch", "lock_and_fetch") if not settings.smoke else ("lock_and_fetch",)
    procs = 4 if not settings.smoke else 1
    results: dict[str, Any] = {
        "future_rows": [small, big],
        "due_rows": due_n,
        "burst_rows": burst,
        "procs": procs,
        "repeats": repeats,
        "dialects": {},
    }
    for dialect in ("postgres", "mariadb"):
        if not settings.wants(dialect):
            continue
        per: dict[str, Any] = {"sizes": {}}
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            for future in (small, big):
                truncate(db.url)
                load_s = load_rows(
                    db.url, future, due_in=timedelta(days=1), spread=timedelta(days=30), prefix="f"
                )
                analyze(db.url)
                queries = time_queries(db.url, calls)
                _delete_prefix(db.url, "d")
                runs: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
                for _ in range(repeats):
                    for s in strategies:
                        cfg = {"strategy": s, "threads": 10, "procs": procs, "strict": False}
                        runs[s].append(run_once(db.url, due_n, cfg, reset=False))
                        _delete_prefix(db.url, "t")
                per["sizes"][str(future)] = {
                    "load_s": round(load_s, 2),
                    "queries": queries,
                    "exec_per_s": {s: median([r["exec_per_s"] for r in rs]) for s, rs in runs.items()},
                    "runs": runs,
                }
                log(
                    f"scale {dialect} future={future}: {queries} exec/s {per['sizes'][str(future)]['exec_per_s']}"
                )
            # a burst: many rows due at once, beside the small future set
            truncate(db.url)
            load_rows(db.url, small, due_in=timedelta(days=1), spread=timedelta(days=30), prefix="f")
            cfg = {"strategy": strategies[-1], "threads": 10, "procs": procs, "strict": False}
            burst_run = run_once(db.url, burst, cfg, reset=False, timeout=max(120.0, burst / 100))
            per["burst"] = {"rows": burst, "strategy": cfg["strategy"], **burst_run}
            log(f"scale {dialect} burst {burst}: {burst_run['exec_per_s']}/s")
        s_small, s_big = per["sizes"][str(small)], per["sizes"][str(big)]
        per["ratios"] = {
            key: ratio(s_big["queries"].get(key), s_small["queries"].get(key)) for key in s_small["queries"]
        }
        per["ratios"].update(
            {f"exec_per_s_{s}": ratio(s_big["exec_per_s"][s], s_small["exec_per_s"][s]) for s in strategies}
        )
        per["burst"]["ratio_to_small"] = ratio(
            per["burst"]["exec_per_s"], s_small["exec_per_s"][strategies[-1]]
        )
        results["dialects"][dialect] = per
    write_result(settings, "scale", results)
    return results
