"""Execution history's cost, interleaved: the engine's defaults with history off against the
same with ``execution_history()`` on (every run recorded in ``scheduled_tasks_history`` by the
background writer), 1 and 4 processes, on PostgreSQL and MariaDB; then a drain while the pruning
statement deletes a million history rows, against a drain without pruning.

Each round drains ``EXECUTIONS`` trivial due executions with history off, then on (the order
alternates round by round so that a drifting load falls on both); the ratio on ÷ off is taken
per round, then the median. The history table is emptied between drains, so every "on" drain
writes into a table of the same size.

``python -m bench.history_ab [--rounds N] [--db postgres,mariadb] [--executions N] [--prune-rows N]``
(default 3 rounds, 20,000 executions, 1,000,000 history rows to prune). Nothing is written to
``bench/out``: it prints its figures, as ``defaults_ab`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench import throughput
from bench.common import create_scheduler_table, dialect_of, raw_connect, scratch_database

DEFAULTS: dict[str, Any] = {"strategy": "default", "threads": 10, "strict": False}


def clear_history(url: str) -> None:
    conn = raw_connect(url, autocommit=True)
    try:
        conn.cursor().execute(
            "DELETE FROM scheduled_tasks_history"
            if dialect_of(url) == "sqlite"
            else "TRUNCATE TABLE scheduled_tasks_history"
        )
    finally:
        conn.close()


def history_rows(url: str) -> int:
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM scheduled_tasks_history")
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def drain(url: str, executions: int, procs: int, history: bool) -> float:
    clear_history(url)
    result = throughput.run_once(url, executions, {**DEFAULTS, "procs": procs, "history": history})
    if result["left"]:
        raise RuntimeError(f"a drain left {result['left']} executions: {result}")
    if history:
        # every run's row was written (the pruning task's row cap may delete some afterwards)
        stats = [h for h in result["history_per_proc"] if h]
        written, failed = sum(h["written"] for h in stats), sum(h["failed"] for h in stats)
        if written < executions or failed:
            raise RuntimeError(f"history on wrote {written} rows of {executions} runs, gave up {failed}")
    return float(result["exec_per_s"])


def compare(dialect: str, executions: int, rounds: int) -> dict[int, list[float]]:
    ratios: dict[int, list[float]] = {1: [], 4: []}
    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        for r in range(rounds):
            for procs in (1, 4):
                order = (False, True) if r % 2 == 0 else (True, False)
                rate = {on: drain(db.url, executions, procs, on) for on in order}
                ratios[procs].append(rate[True] / rate[False])
                print(
                    f"{dialect} round {r + 1} {procs} proc: off {rate[False]:.0f}/s, on {rate[True]:.0f}/s, "
                    f"on/off {rate[True] / rate[False]:.3f}",
                    flush=True,
                )
        for procs in (1, 4):
            print(
                f"{dialect} {procs} proc: on/off per round {[round(x, 3) for x in ratios[procs]]}, "
                f"median {statistics.median(ratios[procs]):.3f}",
                flush=True,
            )
    return ratios


def fill_history(url: str, rows: int) -> float:
    """``rows`` succeeded runs, all past a one-day retention; seconds taken."""
    started = time.perf_counter()
    old = datetime.now(UTC) - timedelta(days=30)
    kind = dialect_of(url)
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        if kind == "postgres":
            cur.execute(
                "INSERT INTO scheduled_tasks_history (task_name, task_instance, execution_time, finished, result, "
                "attempt, duration_ms) SELECT 'old-task', g::text, %s, %s::timestamptz + g * interval '1 ms', "
                "'succeeded', 1, 1 FROM generate_series(1, %s) g",
                (old, old, rows),
            )
        else:
            naive = old.replace(tzinfo=None)
            batch = 20_000
            cur.execute(f"SET SESSION max_recursive_iterations = {batch + 1}")
            for start in range(0, rows, batch):
                cur.execute(
                    "INSERT INTO scheduled_tasks_history (task_name, task_instance, execution_time, finished, "
                    "result, attempt, duration_ms) WITH RECURSIVE seq(n) AS (SELECT %s UNION ALL SELECT n + 1 "
                    "FROM seq WHERE n < %s) SELECT 'old-task', n, %s, %s + INTERVAL n * 1000 MICROSECOND, 'succeeded', 1, 1 "
                    "FROM seq",
                    (start, min(start + batch, rows) - 1, naive, naive),
                )
    finally:
        conn.close()
    return time.perf_counter() - started


def prune_while_draining(dialect: str, executions: int, prune_rows: int, rounds: int) -> list[float]:
    """A drain (history on, 4 processes) while ``prune_rows`` expired runs are pruned, against
    a drain with nothing to prune; the ratio per round. The pruning is the engine's own
    (``HistoryTable.prune``, as the pruning task runs it), started in this process just before
    the drain: the task itself would come last, its row being due after the benchmark's."""
    from ekbatan.distributed_jobs.scheduler import HistoryRetention, SchedulerClient
    from ekbatan.distributed_jobs.scheduler._history.table import HistoryTable

    ratios = []
    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        engine = sa.create_engine(db.url, poolclass=sa.NullPool)
        table = HistoryTable(SchedulerClient(engine).repository)
        retention = HistoryRetention(succeeded=timedelta(days=1), max_runs_per_task=None)
        try:
            for r in range(rounds):
                quiet = drain(db.url, executions, 4, True)
                clear_history(db.url)
                filled = fill_history(db.url, prune_rows)
                pruned: list[tuple[int, float]] = []

                def prune(into: list[tuple[int, float]] = pruned) -> None:
                    began = time.perf_counter()
                    into.append((table.prune(datetime.now(UTC), retention), time.perf_counter() - began))

                pruner = threading.Thread(target=prune)
                pruner.start()
                busy = throughput.run_once(db.url, executions, {**DEFAULTS, "procs": 4, "history": True})
                left_during = expired_rows(db.url)
                pruner.join()
                removed, seconds = pruned[0]
                ratios.append(busy["exec_per_s"] / quiet)
                print(
                    f"{dialect} round {r + 1}: drain alone {quiet:.0f}/s, while pruning {busy['exec_per_s']:.0f}/s "
                    f"(ratio {busy['exec_per_s'] / quiet:.3f}, drain {busy['seconds']} s, "
                    f"{prune_rows - left_during:,} rows pruned by its end); pruning {removed:,} rows took "
                    f"{seconds:.1f} s (filled in {filled:.1f} s)",
                    flush=True,
                )
        finally:
            engine.dispose()
    print(
        f"{dialect} prune: ratio per round {[round(x, 3) for x in ratios]}, median {statistics.median(ratios):.3f}"
    )
    return ratios


def expired_rows(url: str) -> int:
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM scheduled_tasks_history WHERE task_name = 'old-task'")
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.history_ab", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--db", default="postgres,mariadb")
    p.add_argument("--executions", type=int, default=20_000)
    p.add_argument("--prune-rows", type=int, default=1_000_000)
    p.add_argument("--prune-only", action="store_true", help="only the drain while pruning")
    args = p.parse_args()
    print(f"load average at start {os.getloadavg()}", flush=True)
    for dialect in args.db.split(","):
        if not args.prune_only:
            compare(dialect, args.executions, args.rounds)
        if args.prune_rows:
            prune_while_draining(dialect, args.executions, args.prune_rows, args.rounds)
    print(f"load average at end {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
