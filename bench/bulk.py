"""Bulk scheduling: ``SchedulerClient.schedule_batch`` of N one-time instances (due now, no
data), tasks/s, against plain driver inserts of the same rows in the same run:

* ``raw_multirow`` — multi-row ``INSERT … VALUES (…), (…)`` of 1,000 rows per statement, one
  transaction (psycopg 3 / PyMySQL / sqlite3, no SQLAlchemy);
* ``raw_executemany`` — the driver's ``executemany`` of the single-row INSERT, one transaction.

The table is emptied before each run; the instances are built before the clock starts (as
the peers' bulk APIs get ready lists). Median of ``repeats``. pgqueuer's bulk enqueue rate
(from the peers benchmark, same run) is the peer baseline in RESULTS.md.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from bench.common import (
    Settings,
    create_scheduler_table,
    dialect_of,
    log,
    median,
    ratio,
    raw_connect,
    scratch_database,
    truncate,
    write_result,
)

COLS = "task_name, task_instance, task_data, execution_time, picked, version"


def engine_batch(url: str, n: int) -> float:
    from ekbatan.distributed_jobs.scheduler import SchedulerClient, Tasks

    engine = (
        sa.create_engine(url, poolclass=sa.NullPool)
        if not url.startswith("sqlite")
        else sa.create_engine(url)
    )
    try:
        task = Tasks.one_time("bench").execute(lambda i, c: None)
        client = SchedulerClient(engine, [task])
        instances = [task.instance(f"b{i}") for i in range(n)]
        when = datetime.now(UTC)
        t0 = time.perf_counter()
        client.schedule_batch(instances, when)
        return time.perf_counter() - t0
    finally:
        engine.dispose()


def _rows(url: str, n: int) -> tuple[str, list[tuple[Any, ...]]]:
    kind = dialect_of(url)
    now = datetime.now(UTC)
    if kind == "postgres":
        return "%s", [("bench", f"b{i}", None, now, False, 1) for i in range(n)]
    if kind == "mariadb":
        naive = now.replace(tzinfo=None)
        return "%s", [("bench", f"b{i}", None, naive, 0, 1) for i in range(n)]
    ms = int(now.timestamp() * 1000)
    return "?", [("bench", f"b{i}", None, ms, 0, 1) for i in range(n)]


def raw_multirow(url: str, n: int, chunk: int = 1000) -> float:
    mark, rows = _rows(url, n)
    one = "(" + ", ".join([mark] * 6) + ")"
    conn = raw_connect(url, autocommit=False)
    try:
        cur = conn.cursor()
        t0 = time.perf_counter()
        if dialect_of(url) == "sqlite":
            cur.execute("BEGIN")
        for start in range(0, n, chunk):
            part = rows[start : start + chunk]
            flat = [v for r in part for v in r]
            cur.execute(f"INSERT INTO scheduled_tasks ({COLS}) VALUES " + ", ".join([one] * len(part)), flat)
        conn.commit()
        return time.perf_counter() - t0
    finally:
        conn.close()


def raw_executemany(url: str, n: int) -> float:
    mark, rows = _rows(url, n)
    conn = raw_connect(url, autocommit=False)
    try:
        cur = conn.cursor()
        t0 = time.perf_counter()
        if dialect_of(url) == "sqlite":
            cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO scheduled_tasks ({COLS}) VALUES ({', '.join([mark] * 6)})", rows)
        conn.commit()
        return time.perf_counter() - t0
    finally:
        conn.close()


def run(settings: Settings) -> dict[str, Any]:
    n = settings.size(20_000, 10_000, 200)
    repeats = 1 if settings.smoke else settings.repeats
    results: dict[str, Any] = {"tasks": n, "repeats": repeats, "dialects": {}}
    methods = {
        "schedule_batch": engine_batch,
        "raw_multirow": raw_multirow,
        "raw_executemany": raw_executemany,
    }
    for dialect in ("postgres", "mariadb", "sqlite"):
        if not settings.wants(dialect):
            continue
        runs: dict[str, list[float]] = {m: [] for m in methods}
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            for _ in range(repeats):
                for name, fn in methods.items():
                    truncate(db.url)
                    seconds = fn(db.url, n)
                    runs[name].append(round(n / seconds, 1))
        row = {m: {"per_s": median(v), "runs": v} for m, v in runs.items()}
        row["ratio_to_raw_multirow"] = ratio(row["schedule_batch"]["per_s"], row["raw_multirow"]["per_s"])
        results["dialects"][dialect] = row
        log(f"bulk {dialect}: " + ", ".join(f"{m} {row[m]['per_s']}/s" for m in methods))
    write_result(settings, "bulk", results)
    return results
