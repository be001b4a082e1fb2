"""The peers harness, run by the benchmark-only venv ``bench/.venv-peers`` (not the project's).

Standalone on purpose: it imports only the standard library, psycopg and the peer under
test, never the engine or SQLAlchemy. ``bench/peers.py`` starts it as::

    bench/.venv-peers/bin/python bench/peer_runner.py --peer pgqueuer --mode throughput \
        --procs 4 --jobs 20000 --pg "host=127.0.0.1 port=5432 user=postgres"

and reads one JSON object from its last line of stdout.

Method: recreate the peer's own database ``bench_<peer>_<random>``
and install its schema with its own API; bulk-enqueue N no-op jobs with its bulk API (timed:
the enqueue rate); spawn K worker processes, each imports, connects, reports ready and blocks
on an Event; t0 = set the Event; poll the peer's unfinished-job count every 50 ms, t1 when it
reaches 0; SIGTERM the workers, SIGKILL after 5 s. Job bodies are ``async def …: pass``.

``--mode latency``: one worker idles for 1 s, then 50 jobs are enqueued one call each, job *i*
due at ``now + 2 s + i × spacing``; each job body reports ``time.time() − due``. With
``--due-now``, job *i* is enqueued due immediately at ``now + i × spacing`` instead, and its
latency runs from the moment the enqueue call began (through the peer's own NOTIFY wake-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PEERS = ("pgqueuer", "procrastinate")


def _dsn(base: str, db: str) -> str:
    return f"{base} dbname={db}"


def _pg_url(base: str, db: str) -> str:
    parts = dict(p.split("=", 1) for p in base.split())
    return (
        f"postgresql://{parts.get('user', 'postgres')}@{parts.get('host', '127.0.0.1')}:"
        f"{parts.get('port', '5432')}/{db}"
    )


# ------------------------------------------------------------------------------ peer APIs
async def _install(peer: str, base: str, db: str) -> None:
    if peer == "pgqueuer":
        import asyncpg
        from pgqueuer import Queries

        conn = await asyncpg.connect(_pg_url(base, db))
        try:
            await Queries.from_asyncpg_connection(conn).install()
        finally:
            await conn.close()
    else:
        app = _procrastinate_app(base, db)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()


def _procrastinate_app(base: str, db: str, sink: Any = None) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=_dsn(base, db)))

    @app.task(name="noop")
    async def noop(due: float | None = None) -> None:
        if sink is not None and due is not None:
            sink(time.time() - due)

    return app


async def _enqueue_bulk(peer: str, base: str, db: str, jobs: int) -> float:
    chunk = 1000
    if peer == "pgqueuer":
        import asyncpg
        from pgqueuer import Queries

        conn = await asyncpg.connect(_pg_url(base, db))
        try:
            q = Queries.from_asyncpg_connection(conn)
            t0 = time.perf_counter()
            done = 0
            while done < jobs:
                n = min(chunk, jobs - done)
                await q.enqueue(["noop"] * n, [None] * n, [0] * n)
                done += n
            return time.perf_counter() - t0
        finally:
            await conn.close()
    app = _procrastinate_app(base, db)
    async with app.open_async():
        task = app.tasks["noop"]
        t0 = time.perf_counter()
        done = 0
        while done < jobs:
            n = min(chunk, jobs - done)
            await task.batch_defer_async(*([{}] * n))
            done += n
        return time.perf_counter() - t0


async def _enqueue_spaced(
    peer: str, base: str, db: str, tasks: int, first: float, spacing: float, due_now: bool = False
) -> list[float]:
    from datetime import timedelta

    began = time.time()
    dues = [began + first + i * spacing for i in range(tasks)]
    if peer == "pgqueuer":
        import asyncpg
        from pgqueuer import Queries

        conn = await asyncpg.connect(_pg_url(base, db))
        try:
            q = Queries.from_asyncpg_connection(conn)
            if due_now:
                for i in range(tasks):
                    await asyncio.sleep(max(0.0, began + i * spacing - time.time()))
                    called = time.time()
                    await q.enqueue("noop", str(called).encode(), 0)
            else:
                for due in dues:
                    await q.enqueue("noop", str(due).encode(), 0, timedelta(seconds=due - time.time()))
        finally:
            await conn.close()
    else:
        from datetime import UTC, datetime

        app = _procrastinate_app(base, db)
        async with app.open_async():
            task = app.tasks["noop"]
            for due in dues:
                await task.configure(schedule_at=datetime.fromtimestamp(due, UTC)).defer_async(due=due)
    return dues


def _unfinished_sql(peer: str) -> str:
    if peer == "pgqueuer":
        return "SELECT count(*) FROM pgqueuer"
    return "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"


# ------------------------------------------------------------------------------ workers
def worker(pipe: Any, go: Any, peer: str, base: str, db: str, concurrency: int, report_samples: bool) -> None:
    def sink(latency: float) -> None:
        pipe.send({"event": "sample", "latency": latency})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if peer == "pgqueuer":
            import asyncpg
            from pgqueuer import Queries, QueueManager

            conn = await asyncpg.connect(_pg_url(base, db))
            qm = QueueManager(Queries.from_asyncpg_connection(conn))

            @qm.entrypoint("noop")
            async def noop(job: Any) -> None:
                if report_samples and job.payload:
                    sink(time.time() - float(job.payload.decode()))

            loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
            pipe.send({"event": "ready"})
            await loop.run_in_executor(None, go.wait)
            await qm.run()
        else:
            app = _procrastinate_app(base, db, sink if report_samples else None)
            await serve_procrastinate(app, pipe, go, concurrency)

    try:
        asyncio.run(main())
    except Exception as exc:
        pipe.send({"event": "error", "error": f"{type(exc).__name__}: {exc}"})


async def serve_procrastinate(app: Any, pipe: Any, go: Any, concurrency: int) -> None:
    """Open ``app``, report ready, wait for ``go``, then run a worker until SIGTERM."""
    loop = asyncio.get_running_loop()
    async with app.open_async():
        pipe.send({"event": "ready"})
        await loop.run_in_executor(None, go.wait)
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


def _start(
    peer: str, base: str, db: str, procs: int, concurrency: int, samples: bool
) -> tuple[list, list, Any]:
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    processes, pipes = [], []
    for _ in range(procs):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker, args=(child, go, peer, base, db, concurrency, samples), daemon=True)
        p.start()
        child.close()
        processes.append(p)
        pipes.append(parent)
    for pipe in pipes:
        if not pipe.poll(60):
            _stop(processes)
            raise RuntimeError("a peer worker did not report ready within 60 s")
        msg = pipe.recv()
        if msg.get("event") != "ready":
            _stop(processes)
            raise RuntimeError(f"a peer worker failed to start: {msg}")
    return processes, pipes, go


def _stop(processes: list) -> None:
    for p in processes:
        if p.is_alive() and p.pid:
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join(2)


# ------------------------------------------------------------------------------ runs
def _admin(base: str) -> Any:
    import psycopg

    return psycopg.connect(_dsn(base, "postgres"), autocommit=True)


@contextmanager
def peer_database(base: str, prefix: str) -> Iterator[str]:
    """A throwaway database ``<prefix>_<random>`` on the server, dropped (connections and all)
    afterwards."""
    db = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin(base) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
    try:
        yield db
    finally:
        with _admin(base) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def spawn(target: Callable[..., None], args_for: list[tuple[Any, ...]]) -> tuple[list, list, Any]:
    """Processes ``target(pipe, go, *args)`` that report ready, then wait for the returned event."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    processes, pipes = [], []
    for args in args_for:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(child, go, *args), daemon=True)
        p.start()
        child.close()
        processes.append(p)
        pipes.append(parent)
    for pipe in pipes:
        msg = pipe.recv() if pipe.poll(60) else {"event": "error", "error": "not ready within 60 s"}
        if msg.get("event") != "ready":
            stop_and_collect(processes, pipes)
            raise RuntimeError(f"a process failed to start: {msg}")
    return processes, pipes, go


def stop_and_collect(processes: list, pipes: list, timeout: float = 15.0) -> list[dict[str, Any]]:
    """SIGTERM each process, read its report (a big one would block its exit), then reap it."""
    for p in processes:
        if p.is_alive() and p.pid:
            os.kill(p.pid, signal.SIGTERM)
    reports = []
    deadline = time.monotonic() + timeout
    for pipe in pipes:
        try:
            ok = pipe.poll(max(0.1, deadline - time.monotonic()))
            reports.append(pipe.recv() if ok else {"error": "no report before the deadline"})
        except EOFError:
            reports.append({"error": "exited without a report"})
    _stop(processes)
    return reports


def run(args: argparse.Namespace) -> dict[str, Any]:

    with peer_database(args.pg, f"bench_{args.peer}") as db:
        return _run_in(args, db)


def _run_in(args: argparse.Namespace, db: str) -> dict[str, Any]:
    import psycopg

    processes: list = []
    try:
        asyncio.run(_install(args.peer, args.pg, db))
        out: dict[str, Any] = {"peer": args.peer, "mode": args.mode, "version": _peer_version(args.peer)}
        if args.mode == "throughput":
            enqueue_s = asyncio.run(_enqueue_bulk(args.peer, args.pg, db, args.jobs))
            out["enqueue_per_s"] = round(args.jobs / enqueue_s, 1)
            spawned = time.perf_counter()
            processes, pipes, go = _start(args.peer, args.pg, db, args.procs, args.concurrency, False)
            with psycopg.connect(_dsn(args.pg, db), autocommit=True) as mon:
                t0 = spawned if args.from_spawn else time.perf_counter()
                go.set()
                deadline = t0 + args.timeout
                left = args.jobs
                while True:
                    left = mon.execute(_unfinished_sql(args.peer)).fetchone()[0]
                    now = time.perf_counter()
                    if left == 0 or now > deadline:
                        break
                    failed = [p.recv() for p in pipes if p.poll()]
                    failed = [m["error"] for m in failed if m.get("event") == "error"]
                    if failed:
                        out["error"] = failed[0]
                        break
                    time.sleep(0.05)
            elapsed = now - t0
            out.update(
                {
                    "jobs": args.jobs,
                    "procs": args.procs,
                    "left": left,
                    "seconds": round(elapsed, 3),
                    "exec_per_s": round((args.jobs - left) / elapsed, 1),
                }
            )
        else:
            processes, pipes, go = _start(args.peer, args.pg, db, 1, args.concurrency, True)
            go.set()
            time.sleep(1.0)
            asyncio.run(
                _enqueue_spaced(
                    args.peer, args.pg, db, args.tasks, args.first_due, args.spacing, args.due_now
                )
            )
            samples: list[float] = []
            deadline = time.monotonic() + args.first_due + args.tasks * args.spacing + args.timeout
            while len(samples) < args.tasks and time.monotonic() < deadline:
                if pipes[0].poll(0.2):
                    msg = pipes[0].recv()
                    if msg.get("event") == "sample":
                        samples.append(msg["latency"])
                    elif msg.get("event") == "error":
                        out["error"] = msg["error"]
                        break
            out.update({"tasks": args.tasks, "samples": samples})
        return out
    finally:
        _stop(processes)


def _peer_version(peer: str) -> str | None:
    from importlib.metadata import version

    try:
        return version(peer)
    except Exception:
        return None


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", choices=PEERS, required=True)
    p.add_argument("--mode", choices=("throughput", "latency"), default="throughput")
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=10, help="procrastinate worker concurrency")
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--first-due", type=float, default=2.0)
    p.add_argument("--spacing", type=float, default=0.5)
    p.add_argument("--due-now", action="store_true", help="latency: enqueue each job due immediately")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument(
        "--from-spawn",
        action="store_true",
        help="throughput: time from the workers' start (interpreter, imports, connections) too",
    )
    p.add_argument("--pg", default="host=127.0.0.1 port=5432 user=postgres")
    return p.parse_args(argv)


if __name__ == "__main__":
    result = run(parse(sys.argv[1:]))
    print(json.dumps(result))
