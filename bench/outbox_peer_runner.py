"""The event pipeline's peer side: procrastinate jobs deferred inside the application's
transaction, run by the benchmark-only venv ``bench/.venv-peers``.

Standalone on purpose: it imports only the standard library, psycopg, procrastinate and
``peer_runner`` (its neighbour in this folder), never the engine or SQLAlchemy.
``bench/outbox_peer.py`` starts it as::

    bench/.venv-peers/bin/python bench/outbox_peer_runner.py --mode throughput --events 5000 \
        --procs 2 --writers 4 --pg "host=127.0.0.1 port=5432 user=postgres"

and reads one JSON object from the last line of stdout.

The work is the same as ours: one application transaction inserts one ``bench_items`` row and
defers three jobs, one per handler (``bench-audit``, ``bench-index``, ``bench-mail``), each
through ``task.configure(connection=conn).defer(seq=…)`` on the transaction's own connection —
procrastinate's way to commit the jobs with the application's row or not at all. The job bodies
are trivial (``async def``); a job is one delivery.

``--mode throughput``: K worker processes (``run_worker_async(concurrency=C)``, LISTEN/NOTIFY on
as by default) start, connect and idle for a second; then one writer process with W threads
(each its own connection, autocommit off but for the transactions' own BEGIN/COMMIT) runs N
transactions; t0 = the writers' release, t1 = every job ``succeeded``.

``--mode latency``: the workers idle for ``--idle`` seconds; then this process runs N
transactions one by one, ``--spacing`` apart; a job reports ``time.time()`` at its start, and the
commit time is taken right after the transaction's COMMIT returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from typing import Any

HANDLERS = ("bench-audit", "bench-index", "bench-mail")
ITEMS_DDL = "CREATE TABLE bench_items (id uuid PRIMARY KEY, seq integer NOT NULL, label varchar(20) NOT NULL)"
INSERT_ITEM = "INSERT INTO bench_items (id, seq, label) VALUES (%s, %s, 'bench')"


def _app(conninfo: str, sync: bool, sink: Any = None) -> Any:
    import procrastinate

    connector = (
        procrastinate.SyncPsycopgConnector(conninfo=conninfo)
        if sync
        else procrastinate.PsycopgConnector(conninfo=conninfo)
    )
    app = procrastinate.App(connector=connector)

    def handler(name: str) -> Any:
        async def handle(seq: int) -> None:
            if sink is not None:
                sink(seq, name, time.time())

        return handle

    for name in HANDLERS:
        app.task(name=name)(handler(name))
    return app


def _transaction(conn: Any, tasks: list[Any], seq: int) -> None:
    """The application's unit of work: its row and its three jobs, committed together."""
    with conn.transaction():
        conn.execute(INSERT_ITEM, (uuid.uuid4(), seq))
        for task in tasks:
            task.configure(connection=conn).defer(seq=seq)


# ------------------------------------------------------------------------------ processes
def worker(pipe: Any, go: Any, conninfo: str, concurrency: int, record: bool) -> None:
    def sink(seq: int, name: str, at: float) -> None:
        pipe.send({"event": "sample", "seq": seq, "handler": name, "at": at})

    from peer_runner import serve_procrastinate

    try:
        app = _app(conninfo, sync=False, sink=sink if record else None)
        asyncio.run(serve_procrastinate(app, pipe, go, concurrency))
        pipe.send({"event": "stopped"})
    except Exception as exc:
        pipe.send({"event": "error", "error": f"{type(exc).__name__}: {exc}"})


def writer(pipe: Any, go: Any, conninfo: str, threads: int, count: int) -> None:
    import psycopg

    app = _app(conninfo, sync=True)
    tasks = [app.tasks[name] for name in HANDLERS]
    conns = [psycopg.connect(conninfo, autocommit=True) for _ in range(threads)]
    _transaction(conns[0], tasks, -1)  # warm: the statements and the connections
    from numbered_threads import run_numbered

    units = [lambda seq, conn=conn: _transaction(conn, tasks, seq) for conn in conns]
    with app.open():
        pipe.send({"event": "ready"})
        go.wait()
        done, elapsed, errors = run_numbered(units, count)
    for conn in conns:
        conn.close()
    pipe.send({"event": "report", "actions": done, "seconds": elapsed, "errors": errors})


# ------------------------------------------------------------------------------ runs
def _counts(mon: Any) -> dict[str, int]:
    rows = mon.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status").fetchall()
    return {str(status): int(n) for status, n in rows}


def _throughput(args: argparse.Namespace, conninfo: str) -> dict[str, Any]:
    import psycopg
    from peer_runner import spawn, stop_and_collect

    expected = len(HANDLERS) * (args.events + 1)  # + the writers' warm-up transaction
    workers, worker_pipes, workers_go = spawn(worker, [(conninfo, args.concurrency, False)] * args.procs)
    writers, writer_pipes, writers_go = [], [], None
    try:
        writers, writer_pipes, writers_go = spawn(writer, [(conninfo, args.writers, args.events)])
        with psycopg.connect(conninfo, autocommit=True) as mon:
            workers_go.set()
            time.sleep(args.idle)  # the warm-up's jobs run; the workers idle, listening
            t0 = time.perf_counter()
            writers_go.set()
            deadline = t0 + args.timeout
            while True:
                counts = _counts(mon)
                now = time.perf_counter()
                if counts.get("succeeded", 0) >= expected or now > deadline:
                    break
                time.sleep(0.05)
            seconds = now - t0
        wrote = writer_pipes[0].recv() if writer_pipes[0].poll(60) else {"error": "no writer report"}
    finally:
        if writers:
            stop_and_collect(writers, writer_pipes)
        reports = stop_and_collect(workers, worker_pipes)
    deliveries = counts.get("succeeded", 0) - len(HANDLERS)  # the warm-up's, delivered before t0
    return {
        "events": args.events,
        "deliveries": deliveries,
        "expected": expected - len(HANDLERS),
        "seconds": round(seconds, 3),
        "deliveries_per_s": round(deliveries / seconds, 1),
        "writer_actions_per_s": round(wrote["actions"] / wrote["seconds"], 1) if "actions" in wrote else None,
        "writer_errors": wrote.get("errors") or wrote.get("error"),
        "counts": counts,
        "errors": [r["error"] for r in reports if r.get("event") == "error"],
    }


def _latency(args: argparse.Namespace, conninfo: str) -> dict[str, Any]:
    import psycopg
    from peer_runner import spawn, stop_and_collect

    workers, pipes, go = spawn(worker, [(conninfo, args.concurrency, True)] * args.procs)
    samples: list[tuple[int, str, float]] = []
    commits: dict[int, float] = {}
    errors: list[str] = []

    def drain(wait: float) -> None:
        for pipe in pipes:
            while pipe.poll(wait):
                msg = pipe.recv()
                if msg.get("event") == "sample":
                    samples.append((msg["seq"], msg["handler"], msg["at"]))
                elif msg.get("event") == "error":
                    errors.append(msg["error"])
                wait = 0

    try:
        app = _app(conninfo, sync=True)
        tasks = [app.tasks[name] for name in HANDLERS]
        with psycopg.connect(conninfo, autocommit=True) as conn, app.open():
            _transaction(conn, tasks, -1)  # warm this connection and the statements
            go.set()
            time.sleep(args.idle)
            drain(0)
            start = time.time()
            for i in range(args.events):
                time.sleep(max(0.0, start + i * args.spacing - time.time()))
                _transaction(conn, tasks, i)
                commits[i] = time.time()
            deadline = time.monotonic() + args.timeout
            while len([s for s in samples if s[0] >= 0]) < len(HANDLERS) * args.events:
                if time.monotonic() > deadline or errors:
                    break
                drain(0.1)
    finally:
        stop_and_collect(workers, pipes)
    return {
        "events": args.events,
        "spacing_s": args.spacing,
        "latencies": [round(at - commits[seq], 6) for seq, _name, at in samples if seq in commits],
        "errors": errors,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from peer_runner import _dsn, _peer_version, peer_database

    with peer_database(args.pg, "bench_outbox") as db:
        conninfo = _dsn(args.pg, db)
        app = _app(conninfo, sync=True)
        with app.open():
            app.schema_manager.apply_schema()
        import psycopg

        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(ITEMS_DDL)
        out = _throughput(args, conninfo) if args.mode == "throughput" else _latency(args, conninfo)
    return {
        "peer": "procrastinate",
        "version": _peer_version("procrastinate"),
        "mode": args.mode,
        "procs": args.procs,
        "concurrency": args.concurrency,
        "writers": args.writers,
        **out,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("throughput", "latency"), default="throughput")
    p.add_argument("--events", type=int, default=5_000, help="application transactions (3 jobs each)")
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--concurrency", type=int, default=10, help="procrastinate worker concurrency")
    p.add_argument("--writers", type=int, default=4, help="writer threads (throughput)")
    p.add_argument("--spacing", type=float, default=0.25, help="seconds between transactions (latency)")
    p.add_argument("--idle", type=float, default=1.0, help="seconds the workers idle before the writes")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--pg", default="host=127.0.0.1 port=5432 user=postgres")
    return p.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(run(parse(sys.argv[1:]))))
