"""Throughput: N trivial one-time executions due at once, drained by K scheduler processes.

Method (the same harness as the peers', applied to the engine):

1. empty ``scheduled_tasks``, insert N due rows server-side, ``VACUUM ANALYZE``;
2. start K scheduler processes (spawn); each imports, builds its scheduler, opens its pool
   and reports ready, then blocks on an Event;
3. t0 = set the Event; every process starts its scheduler; the parent polls ``count(*)``
   every 50 ms and t1 is when it reaches 0: executions/s = N / (t1 − t0);
4. stop the processes (each reports what it ran and its peak RSS);
5. on PostgreSQL, transactions per execution from ``pg_stat_database`` (``xact_commit`` and
   ``xact_rollback`` deltas over the whole run, less the harness's own count queries).

Matrix: the defaults (no strategy chosen: the engine's own choice, threads 10, 1 and 4
processes); polling strategy (fetch, lock-and-fetch) × threads (10, 50) × processes (1, 4),
batched completions (default) and strict mode (``batch_completions(False)``, one commit per
execution — db-scheduler's write pattern); median of ``repeats`` runs, the runs of all
configurations interleaved so that machine noise spreads over all of them.
"""

from __future__ import annotations

import compileall
import functools
import time
from pathlib import Path
from typing import Any

from bench.common import (
    TASK_NAME,
    Settings,
    analyze,
    create_scheduler_table,
    delta,
    dialect_of,
    load_rows,
    log,
    median,
    pg_xact,
    pg_xact_settled,
    scratch_database,
    truncate,
    wait_until_empty,
    write_result,
)
from bench.crew import start_crew
from bench.worker import scheduler_worker


def config_label(cfg: dict[str, Any]) -> str:
    if cfg["strategy"] == "default":
        return f"defaults (no poll_using_…; threads {cfg['threads']}), {cfg['procs']} proc"
    strategy = "lock-and-fetch" if cfg["strategy"] == "lock_and_fetch" else "fetch"
    if cfg.get("fractions"):
        lower, upper = cfg["fractions"]
        strategy += f" ({lower:g}, {upper:g})"
    mode = "strict" if cfg.get("strict") else "batched"
    return f"{strategy}, {mode}, threads {cfg['threads']}, {cfg['procs']} proc"


def matrix(settings: Settings, dialect: str) -> list[dict[str, Any]]:
    if settings.smoke:
        if dialect == "postgres":
            return [
                {"strategy": "fetch", "threads": 10, "procs": 1, "strict": False},
                {"strategy": "lock_and_fetch", "threads": 10, "procs": 2, "strict": True},
            ]
        return [{"strategy": "default", "threads": 10, "procs": 1, "strict": False}]
    procs_list = (1, 4)
    # out of the box: Scheduler.create(engine, task).build(), what a new user compares
    configs = [
        {"strategy": "default", "threads": 10, "procs": procs, "strict": False} for procs in procs_list
    ]
    for strategy in ("fetch", "lock_and_fetch"):
        for threads in (10, 50):
            for procs in procs_list:
                configs.append({"strategy": strategy, "threads": threads, "procs": procs, "strict": False})
    for strategy in ("fetch", "lock_and_fetch"):
        for procs in procs_list:
            configs.append({"strategy": strategy, "threads": 10, "procs": procs, "strict": True})
    if settings.quick or dialect != "postgres":
        # MariaDB: threads 10 only (the full matrix runs on PostgreSQL, where the goals are)
        configs = [c for c in configs if c["threads"] == 10]
    # lock-and-fetch claims up to upper × threads rows per statement (default 1.0 × threads):
    # the same 10 threads claiming up to 100 rows at a time shows what the claim size is worth
    # ... in both modes: strict mode claiming 100 at a time is exactly the ceiling's
    # db-scheduler pattern (claim 100, then one autocommit DELETE per execution)
    for strict in (False, True):
        for procs in procs_list:
            configs.append(
                {
                    "strategy": "lock_and_fetch",
                    "threads": 10,
                    "procs": procs,
                    "strict": strict,
                    "fractions": (0.5, 10.0),
                }
            )
    return configs


@functools.cache
def compile_sources() -> None:
    """Write the packages' bytecode, once per benchmark process.

    A user's ``pip install`` compiles the package as it installs it; this checkout's editable
    install never does, and where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it)
    every spawned process would compile each of our modules again, about 0.07 s of CPU per
    process, while the peer's venv, installed by pip, has its bytecode. From-spawn timings
    read the bytecode as a deployed process would (the setting only stops writing it).
    """
    for src in sorted((Path(__file__).resolve().parent.parent / "packages").glob("*/src")):
        compileall.compile_dir(src, quiet=1)


def run_once(
    url: str,
    n: int,
    cfg: dict[str, Any],
    timeout: float | None = None,
    reset: bool = True,
    analyze_first: bool = True,
    from_spawn: bool = False,
) -> dict[str, Any]:
    """One drain of ``n`` due rows by ``cfg['procs']`` scheduler processes.

    ``reset=False`` keeps the rows already in the table (the scale benchmark's future rows)
    and counts only the due ones down. ``analyze_first=False`` leaves the freshly loaded table
    as a burst of scheduling leaves it, unanalysed (autovacuum gets to it when it does).
    ``from_spawn=True`` times the drain from the moment the processes are started, so their
    interpreter start, imports, build and first connections count too (as a deploy sees it).
    """
    kind = dialect_of(url)
    if reset:
        truncate(url)
    load_s = load_rows(url, n, prefix="t")
    if analyze_first:
        analyze(url)
    base_opts = {k: v for k, v in cfg.items() if k not in ("procs",)}
    if from_spawn:
        base_opts["warm_pool"] = False  # connections are opened as a deployed process opens them
        compile_sources()
    args = [(url, {**base_opts, "name": f"bench-{i}"}) for i in range(cfg["procs"])]
    spawned = time.perf_counter()
    crew = start_crew(scheduler_worker, args)
    before = pg_xact(url) if kind == "postgres" else None
    t0 = crew.release()
    if from_spawn:
        t0 = spawned
    # the benchmark's own rows: a row of the engine's (the execution history's pruning task)
    # is no part of the drain
    due = f" WHERE task_name = '{TASK_NAME}' AND execution_time <= " + (
        "now()" if kind == "postgres" else "UTC_TIMESTAMP(6)"
    )
    t1, left, polls = wait_until_empty(url, n, timeout or max(60.0, n / 100), where=due)
    elapsed = t1 - t0
    reports = crew.finish()
    result: dict[str, Any] = {
        "executions": n - left,
        "left": left,
        "seconds": round(elapsed, 3),
        "exec_per_s": round((n - left) / elapsed, 1) if elapsed > 0 else None,
        "load_s": round(load_s, 3),
        "executed_per_proc": [r.get("executed") for r in reports],
        "rss_peak_kb": [r.get("rss_kb", {}).get("VmHWM") for r in reports],
        "errors": [r["error"] for r in reports if "error" in r],
        "history_per_proc": [r.get("history") for r in reports],
    }
    if before is not None:
        after = pg_xact_settled(url)
        d = delta(after, before)
        # the harness's own transactions: one per count(*) poll, one per counter read
        harness = polls + 1 + 2
        commits = max(0, d["xact_commit"] - harness)
        rollbacks = d["xact_rollback"]
        executed = max(1, n - left)
        result.update(
            {
                "xact_commit": commits,
                "xact_rollback": rollbacks,
                "commits_per_exec": round(commits / executed, 4),
                "xacts_per_exec": round((commits + rollbacks) / executed, 4),
                "exec_per_xact": round(executed / max(1, commits + rollbacks), 3),
                "tup_deleted": d["tup_deleted"],
                "tup_updated": d["tup_updated"],
            }
        )
    return result


def summarize(cfg: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = {**cfg, "label": config_label(cfg), "runs": runs}
    # a run that did not drain every row (failed completions, a stall) is reported, not averaged
    complete = [r for r in runs if r["left"] == 0 and not r["errors"]]
    good = complete or runs
    row["exec_per_s"] = median([r["exec_per_s"] for r in good])
    row["incomplete_runs"] = len(runs) - len(complete)
    for key in ("commits_per_exec", "xacts_per_exec", "exec_per_xact"):
        vals = [r[key] for r in good if key in r]
        if vals:
            row[key] = median(vals)
    peaks = [max(p for p in r["rss_peak_kb"] if p) for r in runs if any(r["rss_peak_kb"])]
    row["rss_peak_mb"] = round(max(peaks) / 1024, 1) if peaks else None
    row["complete"] = len(complete) == len(runs)
    return row


def run(settings: Settings) -> dict[str, Any]:
    n = settings.size(20_000, 5_000, 200)
    repeats = 1 if settings.smoke else settings.repeats
    results: dict[str, Any] = {"executions": n, "repeats": repeats, "dialects": {}}
    for dialect in ("postgres", "mariadb"):
        if not settings.wants(dialect):
            continue
        configs = matrix(settings, dialect)
        runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            for r in range(repeats):
                for i, cfg in enumerate(configs):
                    out = run_once(db.url, n, cfg)
                    runs[i].append(out)
                    log(
                        f"throughput {dialect} [{config_label(cfg)}] run {r + 1}/{repeats}: "
                        f"{out['exec_per_s']}/s"
                        + (f", {out.get('xacts_per_exec')} xact/exec" if "xacts_per_exec" in out else "")
                    )
        results["dialects"][dialect] = [summarize(cfg, runs[i]) for i, cfg in enumerate(configs)]
    write_result(settings, "throughput", results)
    return results
