"""How fast the operator view answers on big tables: every page and every count with 1,000,000
rows in ``scheduled_tasks`` and 1,000,000 in ``scheduled_tasks_history`` (goal: each under
300 ms on PostgreSQL and MariaDB).

The table holds three task names: 100,000 rows due, 899,000 in the future, 1,000 failing (a
failed run each) and 100 picked (with a heartbeat, as a claim writes it, 50 on each of two
nodes); the history holds 1,000,000 old runs of another name, ``RECENT`` runs finished over the
last day (10 task names, 4 nodes, one in 20 failed: what the overview's hour and day figures
read) and 200 runs of the instance whose page is read. Each page is fetched ``SAMPLES`` times in turn through
the real app (Starlette's TestClient, in process: what is timed is the app and its queries, not
a network), after one unmeasured fetch; the median and the slowest are printed. The app's very
first overview is timed apart: it starts the table-wide counts (and waits for them 0.15 s at most,
then says it is counting), where later overviews show the last count (with its age)
while the next runs in the background.

``python -m bench.operator_pages [--db postgres,mariadb] [--rows N] [--history N] [--recent N] [--samples N]``
(``./run bench operator_pages``). It prints its figures and writes nothing to ``bench/out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bench.common import (
    analyze,
    create_scheduler_table,
    dialect_of,
    load_rows,
    log,
    raw_connect,
    scratch_database,
)
from bench.history_ab import fill_history

GOAL_MS = 300.0
#: the first overview of an app: its table-wide counts are first read then (a request waits for
#: that first read 0.15 s, then says it is counting)
FIRST_OVERVIEW = "overview, the app's first"
#: runs finished over the last day (the overview reads their hour and day figures)
RECENT = 100_000
#: the instance whose own page (with its history) is read
WATCHED = ("reports", "reports1")


def fill_recent_history(url: str, rows: int) -> None:
    """``rows`` runs finished evenly over the last day: 10 task names, 4 nodes, 1 in 20 failed."""
    now = datetime.now(UTC)
    step_us = 86_400_000_000 // max(rows, 1)
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        if dialect_of(url) == "postgres":
            cur.execute(
                "INSERT INTO scheduled_tasks_history (task_name, task_instance, execution_time, picked_by, "
                "finished, result, attempt, duration_ms) SELECT 'recent-' || (g %% 10), g::text, %s, "
                "'node-' || (g %% 4), %s::timestamptz - g::bigint * %s * interval '1 microsecond', "
                "CASE WHEN g %% 20 = 0 THEN 'failed' ELSE 'succeeded' END, 1, g %% 500 "
                "FROM generate_series(1, %s) g",
                (now, now, step_us, rows),
            )
            return
        naive = now.replace(tzinfo=None)
        batch = 20_000
        cur.execute(f"SET SESSION max_recursive_iterations = {batch + 1}")
        for start in range(1, rows + 1, batch):
            cur.execute(
                "INSERT INTO scheduled_tasks_history (task_name, task_instance, execution_time, picked_by, "
                "finished, result, attempt, duration_ms) WITH RECURSIVE seq(n) AS (SELECT %s UNION ALL "
                "SELECT n + 1 FROM seq WHERE n < %s) SELECT CONCAT('recent-', n MOD 10), n, %s, "
                "CONCAT('node-', n MOD 4), %s - INTERVAL (n * %s) MICROSECOND, "
                "IF(n MOD 20 = 0, 'failed', 'succeeded'), 1, n MOD 500 FROM seq",
                (start, min(start + batch - 1, rows), naive, naive, step_us),
            )
    finally:
        conn.close()


def seed(url: str, rows: int, history: int, recent: int = RECENT) -> None:
    due, failing, picked = rows // 10, 1_000, 100
    future = rows - due - failing
    began = time.perf_counter()
    load_rows(url, due, task_name="mail", prefix="m")
    load_rows(
        url,
        future,
        due_in=timedelta(hours=1),
        spread=timedelta(days=30),
        task_name="reports",
        prefix="reports",
    )
    load_rows(url, failing, task_name="charge", prefix="c")
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("UPDATE scheduled_tasks SET consecutive_failures = 1 WHERE task_name = 'charge'")
        # as a claim writes them: picked, by a node, with a heartbeat (a minute old on node-1,
        # just now on node-2)
        for node, numbers, age in (
            ("node-1", range(1, picked // 2 + 1), 60),
            ("node-2", range(picked // 2 + 1, picked + 1), 0),
        ):
            at = datetime.now(UTC) - timedelta(seconds=age)
            # PostgreSQL's timestamptz takes the offset; MariaDB's datetime(6) holds UTC bare
            heartbeat = (at if dialect_of(url) == "postgres" else at.replace(tzinfo=None)).isoformat(sep=" ")
            cur.execute(
                f"UPDATE scheduled_tasks SET picked = TRUE, picked_by = '{node}', "
                f"last_heartbeat = '{heartbeat}' WHERE task_name = 'mail' AND "
                f"task_instance IN ({', '.join(repr(f'm{i}') for i in numbers)})"
            )
    finally:
        conn.close()
    fill_history(url, history)
    fill_recent_history(url, recent)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        finished = datetime.now(UTC) - timedelta(hours=1)
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO scheduled_tasks_history (task_name, task_instance, execution_time, finished, "
                    "result, attempt, duration_ms) VALUES (:t, :i, :e, :f, 'succeeded', 1, 5)"
                ),
                [
                    {"t": WATCHED[0], "i": WATCHED[1], "e": finished, "f": finished + timedelta(seconds=n)}
                    for n in range(200)
                ],
            )
    finally:
        engine.dispose()
    analyze(url)
    log(
        f"operator_pages: {rows} rows and {history} + {recent} history rows loaded in "
        f"{time.perf_counter() - began:.0f} s"
    )


def measure(url: str, samples: int) -> dict[str, list[float]]:
    from starlette.testclient import TestClient

    from ekbatan.distributed_jobs.scheduler import SchedulerClient
    from ekbatan.integrations.operator import operator_app

    engine = sa.create_engine(url, pool_size=4)
    pages = {
        "overview": "/",
        "executions": "/executions",
        "executions of a task": "/executions?task=reports",
        "due": "/executions?state=due",
        "running": "/executions?state=running",
        "failing": "/executions?state=failing",
        "scheduled (future)": "/executions?state=scheduled&task=reports",
        "instance prefix": "/executions?prefix=reports99",
        "an execution with 200 runs": f"/executions/{WATCHED[0]}/{WATCHED[1]}",
    }
    timings: dict[str, list[float]] = {name: [] for name in pages}
    try:
        with TestClient(operator_app(SchedulerClient(engine))) as web:
            # the app's first overview starts the first counts; later ones are served from the
            # last count while it is counted again behind (labelled with its age on the page)
            began = time.perf_counter()
            assert web.get("/").status_code == 200
            timings[FIRST_OVERVIEW] = [(time.perf_counter() - began) * 1000]
            first = web.get("/executions?state=due")
            assert first.status_code == 200, first.text
            marker = 'rel="next" href="'
            start = first.text.index(marker) + len(marker)
            pages["second page of due"] = first.text[start : first.text.index('"', start)].replace(
                "&amp;", "&"
            )
            timings["second page of due"] = []
            for path in pages.values():
                assert web.get(path).status_code == 200, path  # warm: plans and pool
            for _ in range(samples):
                for name, path in pages.items():
                    began = time.perf_counter()
                    answer = web.get(path)
                    timings[name].append((time.perf_counter() - began) * 1000)
                    assert answer.status_code == 200, (path, answer.status_code)
    finally:
        engine.dispose()
    return timings


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.operator_pages", description=__doc__.splitlines()[0])
    p.add_argument("--db", default="postgres,mariadb")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--history", type=int, default=1_000_000)
    p.add_argument("--recent", type=int, default=RECENT, help="runs finished over the last day")
    p.add_argument("--samples", type=int, default=10)
    args = p.parse_args(argv)
    print(f"load average at start {os.getloadavg()}", flush=True)
    for dialect in args.db.split(","):
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            seed(db.url, args.rows, args.history, args.recent)
            for name, values in measure(db.url, args.samples).items():
                mark = "✅" if max(values) < GOAL_MS else "❌"
                print(
                    f"{dialect} {name}: median {statistics.median(values):.1f} ms, slowest {max(values):.1f} ms {mark}",
                    flush=True,
                )
    print(f"load average at end {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
