"""The steady-inflow harness's pgqueuer side, run by the benchmark-only venv ``bench/.venv-peers``.

Standalone on purpose: it imports only the standard library, psycopg, asyncpg, pgqueuer and
``peer_runner`` (its neighbour in this folder), never the engine or SQLAlchemy. The paced
producer (``paced``) and the backlog watcher (``watch``) are plain standard-library code, so
``bench/inflow.py`` imports them from here and both systems are fed and watched by the same
loops. ``bench/inflow.py`` starts one step as::

    bench/.venv-peers/bin/python bench/inflow_peer_runner.py --rate 5000 --seconds 20 \
        --procs 4 --pg "host=127.0.0.1 port=5432 user=postgres"

and reads one JSON object from the last line of stdout: the backlog samples ``[t, rows]``, the
producer's report and every job's due → start lag in seconds.

One step: a fresh database with pgqueuer's schema; K worker processes with pgqueuer's defaults
(``QueueManager.run()``, asyncpg) are spawned, report ready and start together; after a
warm-up one producer process enqueues ``rate / 100`` jobs every 10 ms through
``Queries.enqueue`` with lists, each job's payload the ``time.time()`` of its enqueue call;
``count(*) FROM pgqueuer`` (queued and picked jobs) is sampled every 0.5 s; after the window
the producer stops and the backlog gets up to ``--drain`` seconds to empty; the workers are
sent SIGTERM and report their lags.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

#: one batch per tick: rate / 100 rows every 10 ms
TICK_S = 0.01
#: a producer that fell behind catches up at most this many ticks' rows in one batch
CATCH_UP_TICKS = 10
SAMPLE_EVERY_S = 0.5


# ------------------------------------------------------------------------------ shared loops
def paced(rate: float, seconds: float, insert: Callable[[int, int, float], None]) -> dict[str, Any]:
    """Call ``insert(count, first_index, stamp)`` at the start of every 10 ms tick with the rows
    owed by the end of that tick, for ``seconds``; a tick missed is made up in the next batch
    (up to ``CATCH_UP_TICKS`` ticks' worth), so the achieved rate shows what the producer could
    really sustain."""
    began = time.perf_counter()
    cpu_began = time.process_time()
    done = batches = late_ticks = 0
    cap = max(1, int(rate * TICK_S * CATCH_UP_TICKS))
    next_tick = began
    while True:
        elapsed = time.perf_counter() - began
        if elapsed >= seconds:
            break
        owed = min(cap, int(rate * min(elapsed + TICK_S, seconds)) - done)
        if owed > 0:
            insert(owed, done, time.time())
            done += owed
            batches += 1
        next_tick += TICK_S
        delay = next_tick - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:
            late_ticks += 1
    elapsed = time.perf_counter() - began
    return {
        "target_per_s": rate,
        "inserted": done,
        "seconds": round(elapsed, 3),
        "achieved_per_s": round(done / elapsed, 1) if elapsed > 0 else None,
        "batches": batches,
        "late_ticks": late_ticks,
        "cpu_s": round(time.process_time() - cpu_began, 3),
    }


def watch(count: Callable[[], int], seconds: float, every: float = SAMPLE_EVERY_S) -> list[list[float]]:
    """``[t, backlog]`` every ``every`` s from now for ``seconds`` (the last one at the end)."""
    t0 = time.perf_counter()
    samples: list[list[float]] = []
    taken = 0
    while True:
        now = time.perf_counter()
        samples.append([round(now - t0, 3), count()])
        if now - t0 >= seconds:
            return samples
        taken += 1
        # on a fixed grid, so a slow count does not stretch the spacing
        time.sleep(max(0.0, t0 + min(taken * every, seconds) - time.perf_counter()))


def worth_draining(backlog: int, rate: float) -> bool:
    """More than a second of inflow still queued at the end of the window means the consumers
    were not keeping up; waiting for them to empty it would only spend the time budget."""
    return backlog <= rate


def wait_empty(count: Callable[[], int], timeout: float, every: float = 0.1) -> float | None:
    """Seconds until ``count()`` is 0, or None when it is not within ``timeout``."""
    t0 = time.perf_counter()
    while True:
        if count() == 0:
            return round(time.perf_counter() - t0, 3)
        if time.perf_counter() - t0 > timeout:
            return None
        time.sleep(every)


# ------------------------------------------------------------------------------ pgqueuer processes
def consumer(pipe: Any, go: Any, pg_url: str) -> None:
    """One pgqueuer worker with its defaults; lags kept in memory, sent once after shutdown."""
    lags: list[float] = []

    async def main() -> None:
        import asyncpg
        from pgqueuer import Queries, QueueManager

        loop = asyncio.get_running_loop()
        conn = await asyncpg.connect(pg_url)
        qm = QueueManager(Queries.from_asyncpg_connection(conn))

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            lags.append(time.time() - float(job.payload.decode()))

        loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
        pipe.send({"event": "ready"})
        await loop.run_in_executor(None, go.wait)
        await qm.run()
        await conn.close()

    try:
        asyncio.run(main())
        pipe.send({"event": "report", "lags": lags})
    except Exception as exc:
        pipe.send({"event": "error", "error": f"{type(exc).__name__}: {exc}"})


def producer(pipe: Any, go: Any, pg_url: str, rate: float, seconds: float) -> None:
    """Enqueue through ``Queries.enqueue`` with lists, paced as ours is."""
    import asyncpg
    from pgqueuer import Queries

    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(pg_url))
    queries = Queries.from_asyncpg_connection(conn)

    def insert(count: int, _first: int, stamp: float) -> None:
        payload = repr(stamp).encode()
        loop.run_until_complete(queries.enqueue(["noop"] * count, [payload] * count, [0] * count))

    pipe.send({"event": "ready"})
    go.wait()
    report = paced(rate, seconds, insert)
    loop.run_until_complete(conn.close())
    loop.close()
    pipe.send({"event": "report", **report})


# ------------------------------------------------------------------------------ one step
def run(args: argparse.Namespace) -> dict[str, Any]:
    from peer_runner import peer_database

    with peer_database(args.pg, "bench_inflow") as db:
        return _step(args, db)


def _step(args: argparse.Namespace, db: str) -> dict[str, Any]:
    import psycopg
    from peer_runner import _dsn, _install, _peer_version, _pg_url, spawn, stop_and_collect

    consumers: list = []
    try:
        asyncio.run(_install("pgqueuer", args.pg, db))
        url = _pg_url(args.pg, db)
        consumers, consumer_pipes, consumers_go = spawn(consumer, [(url,)] * args.procs)
        feeders, feeder_pipes, feeder_go = spawn(producer, [(url, args.rate, args.seconds)])
        with psycopg.connect(_dsn(args.pg, db), autocommit=True) as mon:

            def backlog() -> int:
                row = mon.execute("SELECT count(*) FROM pgqueuer").fetchone()
                return int(row[0]) if row else 0

            consumers_go.set()
            time.sleep(args.warmup)
            feeder_go.set()
            samples = watch(backlog, args.seconds)
            fed = (
                feeder_pipes[0].recv() if feeder_pipes[0].poll(args.seconds + 60) else {"error": "no report"}
            )
            stop_and_collect(feeders, feeder_pipes)
            at_end = samples[-1][1]
            drained = wait_empty(backlog, args.drain) if worth_draining(int(at_end), args.rate) else None
            left = backlog()
        reports = stop_and_collect(consumers, consumer_pipes)
        consumers = []
        lags = [round(x, 5) for r in reports for x in r.get("lags", [])]
        return {
            "peer": "pgqueuer",
            "version": _peer_version("pgqueuer"),
            "rate": args.rate,
            "seconds": args.seconds,
            "procs": args.procs,
            "samples": samples,
            "producer": fed,
            "drained_after_s": drained,
            "left": left,
            "executed": len(lags),
            "lags": lags,
            "errors": [r["error"] for r in reports if "error" in r],
        }
    finally:
        if consumers:
            from peer_runner import _stop

            _stop(consumers)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, required=True, help="jobs enqueued per second")
    p.add_argument("--seconds", type=float, default=20.0, help="the window the producer runs")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--warmup", type=float, default=1.0, help="workers idle this long before the inflow")
    p.add_argument("--drain", type=float, default=10.0, help="seconds the backlog may take to empty after")
    p.add_argument("--pg", default="host=127.0.0.1 port=5432 user=postgres")
    return p.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(run(parse(sys.argv[1:]))))
