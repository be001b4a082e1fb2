"""What pauses cost the poll, interleaved: the poll statements over a big ``scheduled_tasks``
with nothing paused (the baseline), with 1,000 executions paused one by one, and with a whole
task name paused whose rows are due, on PostgreSQL and MariaDB.

What a pause changes in the poll: a paused execution leaves the table for
``scheduled_tasks_held`` (so the poll meets one row fewer per paused execution); a paused task
name joins the poll's list of names as one fewer ``IN`` entry (lock-and-fetch) or a ``NOT IN``
(fetch). With nothing paused the statements are those of an engine without pauses.

Each round times, under each condition in turn (the order rotates round by round so that a
drifting load falls on all three), the default claim (``lock_and_fetch`` of the poller's batch,
its claims undone between samples, off the clock) and the fetch strategy's read (``get_due``),
``--samples`` times each; a condition's figure is the median sample, its ratio is taken against
the baseline of the same round, and the report gives the median ratio over the rounds.

``python -m bench.pause_poll [--db postgres,mariadb] [--rows N] [--rounds N] [--samples N] [--smoke]``
(default 1,000,000 rows, 3 rounds, 50 samples). It prints its figures; nothing is written to
``bench/out``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import analyze, create_scheduler_table, load_rows, raw_connect, scratch_database

#: the task the poll claims, and the one whose name is paused in the third condition
BENCH, OTHER = "bench", "other"
#: due rows of each task at every sample: more than one claim takes
DUE = 200
#: executions paused one by one in the second condition
PAUSED_EXECUTIONS = 1_000
CONDITIONS = ("baseline", "1000 executions paused", "a task name paused")


def _scheduler(url: str) -> tuple[Any, sa.Engine]:
    """A scheduler that is never started: its repository makes the poller's statements."""
    from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks

    engine = sa.create_engine(url, pool_size=2, max_overflow=0)
    tasks = [Tasks.one_time(name).execute(lambda i, c: None) for name in (BENCH, OTHER)]
    return Scheduler.create(engine, *tasks).scheduler_name("bench-pauses").build(), engine


def _unclaim(url: str) -> None:
    """Undo the sample's claims (off the clock): the due rows are due and unpicked again."""
    conn = raw_connect(url, autocommit=True)
    try:
        conn.cursor().execute(
            "UPDATE scheduled_tasks SET picked = %s, picked_by = NULL, last_heartbeat = NULL "
            "WHERE picked = %s" % (("false", "true") if url.startswith("postgresql") else ("0", "1"))
        )
    finally:
        conn.close()


def _timed(fn: Callable[[], object], samples: int, reset: Callable[[], None] | None = None) -> float:
    """The median milliseconds of ``samples`` calls of ``fn`` (``reset`` before each, untimed)."""
    times = []
    for _ in range(samples + 1):  # the first warms plans and the pool
        if reset is not None:
            reset()
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times[1:])


def measure(dialect: str, rows: int, rounds: int, samples: int) -> dict[str, dict[str, list[float]]]:
    """Per statement and condition, the ratio to the baseline in each round."""
    ratios: dict[str, dict[str, list[float]]] = {
        s: {c: [] for c in CONDITIONS[1:]} for s in ("lock_and_fetch", "get_due")
    }
    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        future = rows - 2 * DUE
        took = load_rows(db.url, future, due_in=timedelta(days=1), spread=timedelta(days=30), task_name=BENCH)
        load_rows(db.url, DUE, prefix="d", task_name=BENCH)
        load_rows(db.url, DUE, prefix="o", task_name=OTHER)
        analyze(db.url)
        print(f"{dialect}: {rows:,} rows loaded in {took:.1f}s", flush=True)
        scheduler, engine = _scheduler(db.url)
        repo = scheduler.repository
        paused_keys = [(BENCH, f"r{i}") for i in range(1, PAUSED_EXECUTIONS + 1)]
        limit = max(scheduler.upper_limit, 1)

        def enter(condition: str) -> None:
            if condition == CONDITIONS[1]:
                for key in paused_keys:
                    scheduler.pause_execution(key, reason="bench")
            elif condition == CONDITIONS[2]:
                scheduler.pause_task(OTHER, reason="bench")
            scheduler.pauses.refresh(now=True)

        def leave(condition: str) -> None:
            if condition == CONDITIONS[1]:
                for key in paused_keys:
                    scheduler.resume_execution(key)
            elif condition == CONDITIONS[2]:
                scheduler.resume_task(OTHER)
            scheduler.pauses.refresh(now=True)

        try:
            for r in range(rounds):
                order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
                figures: dict[str, dict[str, float]] = {}
                for condition in order:
                    enter(condition)
                    now = datetime.now(UTC)
                    figures[condition] = {
                        "lock_and_fetch": _timed(
                            lambda now=now: repo.lock_and_fetch(now, limit), samples, lambda: _unclaim(db.url)
                        ),
                        "get_due": _timed(lambda now=now: repo.get_due(now, limit), samples),
                    }
                    leave(condition)
                base = figures[CONDITIONS[0]]
                for statement, per_condition in ratios.items():
                    for condition in per_condition:
                        per_condition[condition].append(figures[condition][statement] / base[statement])
                print(
                    f"{dialect} round {r + 1} (order {', '.join(order)}): "
                    + "; ".join(
                        f"{c}: claim {f['lock_and_fetch']:.2f} ms, fetch {f['get_due']:.2f} ms"
                        for c, f in figures.items()
                    ),
                    flush=True,
                )
        finally:
            scheduler.stop()
            engine.dispose()
    for statement, per_condition in ratios.items():
        for condition, values in per_condition.items():
            print(
                f"{dialect} {statement}, {condition} ÷ baseline: per round {[round(v, 3) for v in values]}, "
                f"median {statistics.median(values):.3f}",
                flush=True,
            )
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pause_poll", description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="postgres,mariadb")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks the harness, measures nothing"
    )
    args = parser.parse_args(argv)
    rows, rounds, samples = (
        (PAUSED_EXECUTIONS + 3 * DUE, 1, 2) if args.smoke else (args.rows, args.rounds, args.samples)
    )
    if rows < PAUSED_EXECUTIONS + 2 * DUE:
        parser.error(f"--rows must be at least {PAUSED_EXECUTIONS + 2 * DUE}, got {rows}")
    for dialect in [d.strip() for d in args.db.split(",") if d.strip()]:
        measure(dialect, rows, rounds, samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
