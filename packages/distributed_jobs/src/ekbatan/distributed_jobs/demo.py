"""Two scheduler processes sharing one SQLite file: ``python -m ekbatan.distributed_jobs.demo``.

The parent creates the database, starts two worker processes (``node-1``, ``node-2``), schedules
one-time tasks through a standalone client while they run, lets a recurring task tick, then
prints which node ran what — every one-time task exactly once, the recurring slots spread over
whichever node claimed each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    ExecutionContext,
    Scheduler,
    SchedulerClient,
    Schedules,
    Task,
    TaskInstance,
    Tasks,
    create_table,
)

RUNS_DDL = "CREATE TABLE IF NOT EXISTS demo_runs (task TEXT, instance TEXT, node TEXT, at REAL)"


def _record(engine: sa.Engine, task: str, instance: str, node: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO demo_runs (task, instance, node, at) VALUES (:t, :i, :n, :a)"),
            {"t": task, "i": instance, "n": node, "a": time.time()},
        )


def _tasks(engine: sa.Engine, node: str) -> tuple[Task[Any], Task[Any]]:
    def greet(instance: TaskInstance[dict[str, Any]], ctx: ExecutionContext) -> None:
        data = instance.data or {}
        print(
            f"  [{node}] one-time  {instance.task_name}/{instance.id}: hello {data['to']}",
            flush=True,
        )
        _record(engine, instance.task_name, instance.id, node)

    def report(instance: TaskInstance[None], ctx: ExecutionContext) -> None:
        print(f"  [{node}] recurring {instance.task_name} (version {ctx.fencing_token})", flush=True)
        _record(engine, instance.task_name, instance.id, node)

    greeting = Tasks.one_time("send-greeting", data_type=dict).execute(greet)
    every_second = Tasks.recurring("report", Schedules.fixed_delay(timedelta(seconds=1))).execute(report)
    return greeting, every_second


def worker(db_path: str, node: str, seconds: float) -> None:
    engine = sa.create_engine(f"sqlite:///{db_path}")
    greeting, every_second = _tasks(engine, node)
    scheduler = (
        Scheduler.create(engine, greeting)
        .start_tasks(every_second)
        .scheduler_name(node)
        .threads(4)
        .polling_interval(timedelta(milliseconds=200))
        .heartbeat_interval(timedelta(seconds=1))
        .shutdown_max_wait(timedelta(seconds=5))
        .build()
    )
    with scheduler:
        time.sleep(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the nodes run")
    parser.add_argument("--tasks", type=int, default=10, help="one-time tasks to schedule")
    parser.add_argument("--worker", metavar="NODE", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.db, args.worker, args.seconds)
        return 0

    # removed when the demo ends: repeated runs must not pile up in the system temp dir
    with tempfile.TemporaryDirectory(prefix="ekbatan-demo-") as directory:
        return _run(args, Path(directory) / "demo.sqlite")


def _run(args: argparse.Namespace, db_path: Path) -> int:
    engine = sa.create_engine(f"sqlite:///{db_path}")
    create_table(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(RUNS_DDL))
    print(f"database: {db_path} (removed at exit)")
    print("starting node-1 and node-2 …", flush=True)
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ekbatan.distributed_jobs.demo",
                "--worker",
                node,
                "--db",
                str(db_path),
                "--seconds",
                str(args.seconds),
            ]
        )
        for node in ("node-1", "node-2")
    ]
    try:
        greeting, _ = _tasks(engine, "client")
        client = SchedulerClient(engine, [greeting])
        time.sleep(1.0)
        names = ["Ada", "Grace", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Alan", "Radia"]
        for i in range(args.tasks):
            client.schedule(
                greeting.instance(str(i + 1), {"to": names[i % len(names)]}), timedelta(seconds=i * 0.3)
            )
        print(f"scheduled {args.tasks} one-time tasks, due over the next {args.tasks * 0.3:.1f}s", flush=True)
        for node in nodes:
            node.wait(timeout=args.seconds + 60)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()

    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT task, instance, node FROM demo_runs ORDER BY at")).all()
    one_time = [r for r in rows if r.task == "send-greeting"]
    recurring = [r for r in rows if r.task == "report"]
    per_instance = Counter(r.instance for r in one_time)
    print()
    print(
        f"one-time executions: {len(one_time)} of {args.tasks} "
        f"(each exactly once: {sorted(per_instance.values()) == [1] * args.tasks})"
    )
    print(f"  by node: {dict(Counter(r.node for r in one_time))}")
    print(f"recurring 'report' runs: {len(recurring)}, by node: {dict(Counter(r.node for r in recurring))}")
    left = client.get_scheduled_executions()
    print(f"rows left in scheduled_tasks: {[str(e.key) for e in left]} (the recurring task's next slot)")
    engine.dispose()
    return 0 if sorted(per_instance.values()) == [1] * args.tasks else 1


if __name__ == "__main__":
    raise SystemExit(main())
