"""Footprint: what an idle instance costs the database, and a worker's memory.

* Idle queries per second: one scheduler process with default settings (threads 10, polling
  10 s, fetch; LISTEN/NOTIFY on PostgreSQL) on an empty table, idle for a window; every
  statement the engine sends through SQLAlchemy is counted by a ``before_cursor_execute``
  listener (``pg_stat_statements`` is not preloaded on this server). On PostgreSQL the
  ``pg_stat_database`` transaction counters of the scratch database over the process's whole
  life (start, idle window, stop) are reported beside it as a cross-check.
* RSS (``VmRSS`` from /proc) of the idle worker, against a bare process that imported
  SQLAlchemy and the driver and opened one connection (the baseline); and the peak RSS
  (``VmHWM``) of a worker draining N due executions (threads 10, fetch).
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    Settings,
    create_scheduler_table,
    delta,
    dialect_of,
    log,
    pg_xact,
    pg_xact_settled,
    rss_kb,
    scratch_database,
    write_result,
)
from bench.crew import start_crew
from bench.throughput import run_once
from bench.worker import scheduler_worker


def bare_worker(pipe: Any, go: Any, stop: Any, url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
        pipe.send({"event": "ready"})
        go.wait()
        stop.wait()
        pipe.send({"rss_kb": rss_kb()})


def idle(url: str, seconds: float) -> dict[str, Any]:
    kind = dialect_of(url)
    before = pg_xact(url) if kind == "postgres" else None
    crew = start_crew(
        scheduler_worker, [(url, {"count_statements": True, "name": "bench-idle", "warm_pool": False})]
    )
    started = time.perf_counter()
    crew.release()
    time.sleep(seconds)
    report = crew.finish()[0]
    lifetime = time.perf_counter() - started
    out = {
        "idle_s": round(report.get("running_s", seconds), 2),
        "statements": report.get("statements"),
        "statements_per_s": round(
            report.get("statements", 0) / max(report.get("running_s", seconds), 1e-9), 3
        ),
        "rss_mb": round(report.get("rss_kb", {}).get("VmRSS", 0) / 1024, 1),
        "threads": report.get("threads_alive"),
        "error": report.get("error"),
    }
    if before is not None:
        d = delta(pg_xact_settled(url), before)
        harness = 3
        xacts = max(0, d["xact_commit"] + d["xact_rollback"] - harness)
        out["pg_xacts_lifetime"] = xacts
        out["pg_xacts_per_s_lifetime"] = round(xacts / lifetime, 3)
    return out


def bare(url: str) -> dict[str, Any]:
    crew = start_crew(bare_worker, [(url,)])
    crew.release()
    report = crew.finish()[0]
    return {"rss_mb": round(report.get("rss_kb", {}).get("VmRSS", 0) / 1024, 1)}


def run(settings: Settings) -> dict[str, Any]:
    seconds = settings.size(30.0, 15.0, 1.0)
    n = settings.size(20_000, 5_000, 200)
    results: dict[str, Any] = {"idle_window_s": seconds, "load_executions": n, "dialects": {}}
    for dialect in ("postgres", "mariadb", "sqlite"):
        if not settings.wants(dialect):
            continue
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            row: dict[str, Any] = {"bare": bare(db.url), "idle": idle(db.url, seconds)}
            if dialect != "sqlite":
                load = run_once(db.url, n, {"strategy": "fetch", "threads": 10, "procs": 1, "strict": False})
                peak = max((p for p in load["rss_peak_kb"] if p), default=0)
                row["load"] = {"exec_per_s": load["exec_per_s"], "rss_peak_mb": round(peak / 1024, 1)}
        results["dialects"][dialect] = row
        log(f"footprint {dialect}: {row}")
    write_result(settings, "footprint", results)
    return results
