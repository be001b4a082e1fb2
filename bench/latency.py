"""Latency on an idle system: from an execution's due time to the start of its handler.

One scheduler process (threads 10) starts on an empty table and idles for 1 s. Then 50 tasks
are scheduled one call each, task *i* due at ``t + 2 s + i × spacing`` (they come due one
at a time with nothing else in the table); each handler records ``time.time() − due``.
Sources of the scheduling call:

* ``self`` — through the scheduler itself (the due times are known to its process: a local
  timer for the earliest known due time can wake it);
* ``other`` — through a ``SchedulerClient`` in another process (the harness): the scheduler
  learns of them only from the database (on PostgreSQL from a ``NOTIFY`` hint, else from
  its next poll);
* ``now`` — another process schedules a task due immediately (once every ``spacing`` s):
  latency from the scheduling call to the start.

Cases: PostgreSQL, each polling strategy × polling interval (the default 10 s and 1 s) ×
source; MariaDB (both strategies) and SQLite (fetch) at the default interval, ``self`` and
``other``. Baselines in the same run: pgqueuer's latency measured the same way (its worker
sleeps until the next ``execute_after`` and listens for NOTIFY), once with jobs enqueued 2 s
ahead and once with jobs enqueued due now (timed from the enqueue call, like ``now``). The
other process schedules through a pooled connection opened beforehand, as pgqueuer enqueues
through one open connection.

The due-now cases and pgqueuer's due-now baseline take turns, round after round (``--repeats``,
3 by default), and each reports its median round: these figures move by milliseconds with the
host's idle wake-ups, and interleaving keeps both sides on the same minutes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bench import peers
from bench.common import (
    Settings,
    create_scheduler_table,
    log,
    median,
    percentile,
    pooled_engine,
    scratch_database,
    truncate,
    wait_until_empty,
    write_result,
)
from bench.crew import start_crew
from bench.worker import scheduler_worker


def cases(settings: Settings, dialect: str) -> list[dict[str, Any]]:
    if settings.smoke:
        if dialect == "postgres":
            return [
                {"strategy": "fetch", "polling": 10, "source": "self"},
                {"strategy": "lock_and_fetch", "polling": 10, "source": "now"},
            ]
        return [{"strategy": "fetch", "polling": 10, "source": "self"}]
    out = []
    if dialect == "postgres":
        for strategy in ("fetch", "lock_and_fetch"):
            for polling in (10, 1):
                for source in ("self", "other"):
                    out.append({"strategy": strategy, "polling": polling, "source": source})
            out.append({"strategy": strategy, "polling": 10, "source": "now"})
    else:
        strategies = ("fetch", "lock_and_fetch") if dialect == "mariadb" else ("fetch",)
        for strategy in strategies:
            for source in ("self", "other"):
                out.append({"strategy": strategy, "polling": 10, "source": source})
    return out


def run_case(
    url: str, case: dict[str, Any], tasks: int, spacing: float, first_due: float, idle_first: float
) -> dict[str, Any]:
    from ekbatan.distributed_jobs.scheduler import SchedulerClient, Tasks

    truncate(url)
    opts = {
        "strategy": case["strategy"],
        "polling": case["polling"],
        "threads": 10,
        "body": "record",
        "mode": "latency_local" if case["source"] == "self" else "run",
        "tasks": tasks,
        "spacing": spacing,
        "first_due": first_due,
        "idle_first": idle_first,
        "name": "bench-latency",
    }
    crew = start_crew(scheduler_worker, [(url, opts)])
    crew.release()
    began = time.time()
    last_due = began + idle_first + first_due + tasks * spacing
    if case["source"] in ("other", "now"):
        # A pooled, already open connection, as in an application: a fresh connection per
        # call would add its set-up (~3 ms on PostgreSQL here) to every due-now figure.
        engine = pooled_engine(url, 1)
        with engine.connect():
            pass
        task = Tasks.one_time("bench", dict).execute(lambda i, c: None)
        client = SchedulerClient(engine, [task])
        time.sleep(idle_first)
        start = time.time()
        for i in range(tasks):
            if case["source"] == "other":
                due = start + first_due + i * spacing
            else:
                time.sleep(max(0.0, start + i * spacing - time.time()))
                due = time.time()
            client.schedule(task.instance(f"o{i}", {"due": due}), datetime.fromtimestamp(due, UTC))
        last_due = time.time() if case["source"] == "now" else start + first_due + tasks * spacing
        engine.dispose()
    time.sleep(max(0.0, last_due - time.time()))
    _, left, _ = wait_until_empty(url, tasks, timeout=case["polling"] * 1.5 + 10)
    reports = crew.finish()
    report = reports[0]
    samples = [s[1] for s in report.get("samples", [])]
    return {
        **case,
        "n": len(samples),
        "expected": tasks,
        "left": left,
        "p50_ms": _ms(percentile(samples, 50)),
        "p95_ms": _ms(percentile(samples, 95)),
        "min_ms": _ms(min(samples) if samples else None),
        "max_ms": _ms(max(samples) if samples else None),
        "error": report.get("error"),
    }


def _logged(dialect: str, out: dict[str, Any]) -> dict[str, Any]:
    log(
        f"latency {dialect} {out['strategy']} polling {out['polling']}s source {out['source']}: "
        f"p50 {out['p50_ms']} ms, p95 {out['p95_ms']} ms (n={out['n']})"
    )
    return out


def median_round(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of one case as one row: the median of their p50s and of their p95s, the
    worst maximum, every round's own figures under ``rounds``."""
    if len(runs) == 1:
        return runs[0]
    figures = ("n", "p50_ms", "p95_ms", "max_ms")
    merged = {
        **runs[0],
        "p50_ms": median([r.get("p50_ms") for r in runs]),
        "p95_ms": median([r.get("p95_ms") for r in runs]),
        "max_ms": max((r["max_ms"] for r in runs if r.get("max_ms") is not None), default=None),
        "rounds": [{k: r.get(k) for k in figures} for r in runs],
    }
    for summed in ("n", "expected", "left"):
        if summed in runs[0]:
            merged[summed] = sum(r.get(summed) or 0 for r in runs)
    if "status" in runs[0]:
        merged["status"] = "ok" if all(r.get("status") == "ok" for r in runs) else "failed"
        merged["error"] = next((r["error"] for r in runs if r.get("error")), None)
    return merged


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def run(settings: Settings) -> dict[str, Any]:
    tasks = settings.size(50, 20, 4)
    spacing = 0.25 if not settings.smoke else 0.1
    first_due = 2.0 if not settings.smoke else 0.5
    idle_first = 1.0 if not settings.smoke else 0.3
    results: dict[str, Any] = {
        "tasks": tasks,
        "spacing_s": spacing,
        "first_due_s": first_due,
        "dialects": {},
    }
    for dialect in ("postgres", "mariadb", "sqlite"):
        if not settings.wants(dialect):
            continue
        rows = []
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            planned = cases(settings, dialect)
            due_now = [case for case in planned if case["source"] == "now"]
            for case in planned:
                if case["source"] != "now":
                    rows.append(
                        _logged(dialect, run_case(db.url, case, tasks, spacing, first_due, idle_first))
                    )
            if due_now:
                # Due-now figures are the tail of one round trip chain, and the host's idle wake-ups
                # move them by milliseconds from minute to minute: the engine's cases and
                # pgqueuer's take turns, round after round, and each reports the median round.
                with_peer = dialect == "postgres" and not settings.smoke
                rounds = 1 if settings.smoke else settings.repeats
                ours: list[list[dict[str, Any]]] = [[] for _ in due_now]
                theirs: list[dict[str, Any]] = []
                for _ in range(rounds):
                    for runs, case in zip(ours, due_now, strict=True):
                        runs.append(
                            _logged(dialect, run_case(db.url, case, tasks, spacing, first_due, idle_first))
                        )
                    if with_peer:
                        theirs.append(peers.latency(settings, tasks, spacing, due_now=True))
                        log(f"latency pgqueuer due-now: {theirs[-1]}")
                rows += [median_round(runs) for runs in ours]
                if with_peer:
                    results["pgqueuer_now"] = median_round(theirs)
        results["dialects"][dialect] = rows
    if settings.wants("postgres") and not settings.smoke:
        results["pgqueuer"] = peers.latency(settings, tasks, spacing)
        log(f"latency pgqueuer: {results['pgqueuer']}")
    elif settings.wants("postgres"):
        # smoke: the command only (no peer process during the test suite unless its venv exists)
        results["pgqueuer"] = (
            peers.latency(settings, tasks, spacing)
            if peers.venv_ready(settings)
            else {
                "status": "unavailable",
                "command": peers.latency_command(settings, "pgqueuer", tasks, spacing),
            }
        )
    write_result(settings, "latency", results)
    return results
