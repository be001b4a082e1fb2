"""How fast the operator view answers on big tables: every page and every count with 1,000,000
rows in ``scheduled_tasks`` and 1,000,000 in ``scheduled_tasks_history`` (goal: each under
300 ms on PostgreSQL and MariaDB).

The table holds three task names: 100,000 rows due, 899,000 in the future, 1,000 failing (a
failed run each) and 100 picked; the history holds 1,000,000 old runs of another name and 200
runs of the instance whose page is read. Each page is fetched ``SAMPLES`` times in turn through
the real app (Starlette's TestClient, in process: what is timed is the app and its queries, not
a network), after one unmeasured fetch; the median and the slowest are printed.

``python -m bench.operator_pages [--db postgres,mariadb] [--rows N] [--history N] [--samples N]``
(``./run bench operator_pages``). It prints its figures and writes nothing to ``bench/out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from bench.common import analyze, create_scheduler_table, load_rows, log, raw_connect, scratch_database
from bench.history_ab import fill_history

GOAL_MS = 300.0
#: the instance whose own page (with its history) is read
WATCHED = ("reports", "reports1")


def seed(url: str, rows: int, history: int) -> None:
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
        cur.execute(
            "UPDATE scheduled_tasks SET picked = TRUE, picked_by = 'node-1' WHERE task_name = 'mail' AND "
            f"task_instance IN ({', '.join(repr(f'm{i}') for i in range(1, picked + 1))})"
        )
    finally:
        conn.close()
    fill_history(url, history)
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
        f"operator_pages: {rows} rows and {history} history rows loaded in {time.perf_counter() - began:.0f} s"
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
    p.add_argument("--samples", type=int, default=10)
    args = p.parse_args(argv)
    print(f"load average at start {os.getloadavg()}", flush=True)
    for dialect in args.db.split(","):
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            seed(db.url, args.rows, args.history)
            for name, values in measure(db.url, args.samples).items():
                mark = "✅" if max(values) < GOAL_MS else "❌"
                print(
                    f"{dialect} {name}: median {statistics.median(values):.1f} ms, slowest {max(values):.1f} ms {mark}",
                    flush=True,
                )
    print(f"load average at end {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
