"""One node of a jobs cluster, in its own OS process, for ``test_jobs_cluster.py``.

``python jobs_cluster_node.py --url URL --node NAME --prefix P --scenario slots|long`` with the
repository root on ``PYTHONPATH``. Talks JSON lines on stdout (``built``, ``started``,
``stopped``) and obeys ``start`` / ``stop`` on stdin (end of input also stops it). Every run
of every job inserts a row into ``job_runs`` (job, fencing token, slot, node, start, end):
the test reads the table, not this process's memory.

* ``slots`` — three jobs ``P-alpha``, ``P-beta``, ``P-gamma`` (fixed delays 100, 150, 200 ms)
  that return at once.
* ``long`` — one job ``P-long`` (fixed delay 1 h) that runs until its scheduler shuts down:
  what a ``kill -9`` hits.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs import DistributedJob, JobContext, JobRegistry, Schedule, Schedules

METADATA = sa.MetaData()
JOB_RUNS = sa.Table(
    "job_runs",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(100), nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("slot", sa.String(40), nullable=False),
    sa.Column("node", sa.String(20), nullable=False),
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("ended", sa.Float, nullable=True),
)

SLOT_JOBS = {"alpha": 100, "beta": 150, "gamma": 200}  # fixed delay in ms
LONG_JOB = "long"

_out_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


class RecordedJob(DistributedJob):
    def __init__(self, name: str, schedule: Schedule, app: sa.Engine, node: str, long: bool) -> None:
        self._name = name
        self._schedule = schedule
        self._app = app
        self._node = node
        self._long = long

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return self._schedule

    def execute(self, ctx: JobContext) -> None:
        started = time.time()
        with self._app.begin() as conn:
            run_id = conn.execute(
                JOB_RUNS.insert().values(
                    job=self._name,
                    token=ctx.fencing_token,
                    slot=ctx.execution_time.isoformat(),
                    node=self._node,
                    started=started,
                )
            ).inserted_primary_key[0]
        if self._long:
            deadline = time.monotonic() + 60
            while not ctx.is_shutting_down and time.monotonic() < deadline:
                time.sleep(0.05)
        with self._app.begin() as conn:
            conn.execute(JOB_RUNS.update().where(JOB_RUNS.c.id == run_id).values(ended=time.time()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--scenario", choices=["slots", "long"], required=True)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--missed-heartbeats", type=int, default=6)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format=f"{args.node} %(levelname)s %(message)s"
    )

    jobs_pool = sa.create_engine(args.url)
    app_pool = sa.create_engine(args.url)
    if args.scenario == "slots":
        jobs = [
            RecordedJob(
                f"{args.prefix}-{name}",
                Schedules.fixed_delay(timedelta(milliseconds=ms)),
                app_pool,
                args.node,
                False,
            )
            for name, ms in SLOT_JOBS.items()
        ]
    else:
        jobs = [
            RecordedJob(
                f"{args.prefix}-{LONG_JOB}",
                Schedules.fixed_delay(timedelta(hours=1)),
                app_pool,
                args.node,
                True,
            )
        ]
    limit = args.missed_heartbeats
    registry = (
        JobRegistry.builder()
        .connection_provider(jobs_pool)
        .with_jobs(jobs)
        .poll_interval(timedelta(milliseconds=args.poll_ms))
        .heartbeat_interval(timedelta(milliseconds=args.heartbeat_ms))
        .shutdown_max_wait(timedelta(seconds=2))
        .customize_scheduler(lambda b: b.missed_heartbeats_limit(limit).scheduler_name(args.node))
        .build()
    )
    emit("built")
    started = False
    for line in sys.stdin:
        command = line.strip()
        if command == "start" and not started:
            registry.start()
            started = True
            emit("started")
        elif command == "stop":
            break
    registry.stop()
    jobs_pool.dispose()
    app_pool.dispose()
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
