"""One scheduler process of the fault-injection tests (``test_faults_scheduler.py``).

``python integration-tests/scheduler_fault_node.py --url URL --name NAME [options]`` with the
repository root on ``PYTHONPATH``. It knows these tasks; every handler call first inserts
(task, instance, pid, node, version, time) into ``fault_runs``, in its own transaction, so the
test reads what ran from that table rather than from this process's memory:

* ``work`` (one-time): then sleeps ``--work-ms``;
* ``tick-0`` … ``tick-N`` (recurring, fixed delay ``--tick-ms``; ``--ticks N`` of them, started
  on ``start``);
* ``hold`` (one-time): with ``--hold``, waits until the ``release`` command, ignoring shutdown (a
  hung handler); without it, returns at once.

``--tally N`` makes ``work`` count its runs in memory instead (a preallocated counter per
instance id ``0`` … ``N-1``, so that counting does not grow the process): the ``report`` line
then carries them, base64, as ``tally``; ``work`` then does not sleep either. ``--strategy
lock_and_fetch`` polls with that strategy instead of the engine's default.

``--pass-file PATH`` adds ``flaky`` (one-time): it records its run, then fails unless PATH exists;
after one retry it is kept as a dead letter (``max_retries(1)``, retried at once).

``--priority`` enables priorities (recurring tasks before one-time ones when both are due).
``--clock-offset-ms`` runs the scheduler on a clock that many milliseconds ahead of the system's.

Each ``fault_runs`` row also has ``due_us``: when the run was due (its execution time).

Commands on stdin: ``start``, ``status`` (a ``status`` line with the scheduler events counted so
far, and as ``paused`` the task names it last read as paused), ``release``, ``stop`` (a
``report`` line with the events and how long ``stop()`` took; then the process exits, abandoning
any hung handler). Replies are JSON lines on stdout.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    Scheduler,
    SchedulerEventType,
    SchedulerListener,
    Schedules,
    SystemClock,
    Tasks,
)

WORK_TASK = "work"
HOLD_TASK = "hold"
FLAKY_TASK = "flaky"

METADATA = sa.MetaData()
FAULT_RUNS = sa.Table(
    "fault_runs",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task", sa.String(50), nullable=False),
    sa.Column("instance", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("node", sa.String(50), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("at_us", sa.BigInteger, nullable=False),
    # when the run was due (the execution's execution_time), microseconds since the epoch
    sa.Column("due_us", sa.BigInteger, nullable=True),
)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def tick_name(i: int) -> str:
    return f"tick-{i}"


class OffsetClock(SystemClock):
    """The system clock, shifted: a machine whose clock is wrong by ``offset``."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        return super().now() + self.offset


def _epoch_us(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(microseconds=1)


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--hb-ms", type=int, default=500)
    parser.add_argument("--missed-limit", type=int, default=4)
    parser.add_argument("--shutdown-wait-ms", type=int, default=2000)
    parser.add_argument("--work-ms", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=0)
    parser.add_argument("--tick-ms", type=int, default=200)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--clock-offset-ms", type=int, default=0)
    parser.add_argument("--priority", action="store_true")
    parser.add_argument("--tally", type=int, default=0)
    parser.add_argument("--strategy", default=None, choices=["fetch", "lock_and_fetch"])
    parser.add_argument("--pass-file", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name} %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    # the engine's INFO lines per poll would drown the ones the tests look for
    logging.getLogger("ekbatan.distributed_jobs.scheduler.polling").setLevel(logging.WARNING)

    engine = sa.create_engine(args.url, pool_size=args.threads + 5, max_overflow=10)
    pid = os.getpid()
    released = threading.Event()

    def record(instance: Any, ctx: Any) -> None:
        with engine.begin() as conn:
            conn.execute(
                FAULT_RUNS.insert().values(
                    task=ctx.execution.task_name,
                    instance=instance.id,
                    pid=pid,
                    node=args.name,
                    version=ctx.execution.version,
                    at_us=time.time_ns() // 1000,
                    due_us=_epoch_us(ctx.execution.execution_time),
                )
            )

    tally = bytearray(args.tally)
    tally_lock = threading.Lock()

    def work(instance: Any, ctx: Any) -> None:
        if args.tally:
            with tally_lock:
                tally[int(instance.id)] += 1
            return
        record(instance, ctx)
        time.sleep(args.work_ms / 1000)

    def hold(instance: Any, ctx: Any) -> None:
        record(instance, ctx)
        _emit("handler_started", id=instance.id, version=ctx.execution.version)
        if args.hold:
            released.wait()
            _emit("handler_returned", id=instance.id, version=ctx.execution.version)

    ticks = [
        Tasks.recurring(tick_name(i), Schedules.fixed_delay(timedelta(milliseconds=args.tick_ms))).execute(
            record
        )
        for i in range(args.ticks)
    ]

    def flaky(instance: Any, ctx: Any) -> None:
        record(instance, ctx)
        if not os.path.exists(args.pass_file):
            raise RuntimeError(f"{instance.id}: {args.pass_file} is missing")

    extra = []
    if args.pass_file is not None:
        retry_once = FailureHandlers.max_retries(1).retry_every(timedelta(0)).then_dead_letter()
        extra.append(Tasks.one_time(FLAKY_TASK).on_failure(retry_once).execute(flaky))
    events: dict[str, int] = {}
    lock = threading.Lock()

    class Counter(SchedulerListener):
        def on_scheduler_event(self, event: SchedulerEventType) -> None:
            with lock:
                events[event.name] = events.get(event.name, 0) + 1

    clock = OffsetClock(timedelta(milliseconds=args.clock_offset_ms))
    builder = (
        Scheduler.create(
            engine, Tasks.one_time(WORK_TASK).execute(work), Tasks.one_time(HOLD_TASK).execute(hold), *extra
        )
        .start_tasks(*ticks)
        .threads(args.threads)
        .polling_interval(timedelta(milliseconds=args.poll_ms))
        .heartbeat_interval(timedelta(milliseconds=args.hb_ms))
        .missed_heartbeats_limit(args.missed_limit)
        .shutdown_max_wait(timedelta(milliseconds=args.shutdown_wait_ms))
        .scheduler_name(args.name)
        .clock(clock)
        .add_listener(Counter())
    )
    if args.strategy == "lock_and_fetch":
        builder = builder.poll_using_lock_and_fetch()
    elif args.strategy == "fetch":
        builder = builder.poll_using_fetch()
    scheduler = (builder.enable_priority() if args.priority else builder).build()
    _emit("built", pid=pid)

    def counted() -> dict[str, int]:
        with lock:
            return dict(events)

    for line in sys.stdin:
        command = line.strip()
        if command == "start":
            scheduler.start()
            _emit("started")
        elif command == "status":
            _emit("status", events=counted(), paused=sorted(scheduler.paused_task_names))
        elif command == "release":
            released.set()
        elif command == "stop":
            began = time.monotonic()
            scheduler.stop()
            _emit(
                "report",
                events=counted(),
                stop_seconds=time.monotonic() - began,
                executing_after_stop=len(scheduler.get_currently_executing()),
                tally=base64.b64encode(bytes(tally)).decode() if args.tally else None,
            )
            engine.dispose()
            # worker threads are daemons: a hung handler dies with the process
            return 0
        elif command:
            _emit("error", message=f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
