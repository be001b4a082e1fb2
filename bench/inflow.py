"""Steady inflow: the highest rate a system keeps up with, and its lag at half that rate.

The other benchmarks drain rows that are all due at once; users also run a steady inflow.
On PostgreSQL, with the defaults of both systems, 4 worker processes each:

* ours: ``Scheduler.create(engine, task).threads(10).build()`` as ``bench.worker`` builds the
  defaults; pgqueuer: its defaults as ``bench/peer_runner.py`` runs them (the pgqueuer side of
  every step runs in ``bench/inflow_peer_runner.py`` inside ``bench/.venv-peers``);
* one producer process inserts ``R / 100`` due-now rows every 10 ms for a fixed window —
  ours through ``SchedulerClient.schedule_batch``, pgqueuer through ``Queries.enqueue`` with
  lists, both paced by the same loop (``inflow_peer_runner.paced``); each row carries the
  ``time.time()`` of its insert call (ours: the task data and the execution time; pgqueuer:
  the payload), and each handler records its start ``time.time()`` minus that;
* the backlog (rows not yet executed: ours ``execution_time <= now()``, pgqueuer its whole
  queue table) is sampled every 0.5 s; a rate is *sustainable* when the producer achieved it
  (≥ 95 % of R, else the step is *producer-bound*, no verdict on the consumers) and the
  backlog is bounded: its least-squares slope over the second half of the window is below
  5 % of the achieved arrival rate (the rule of ``bench.pipeline``);
* the search doubles R from a start rate until a step is not sustainable, then bisects;
  ours and pgqueuer take turns step by step so drift on a shared host hits both alike;
* at 50 % of each system's own highest sustainable rate, the due → start lag p50/p95;
* a big future: 1,000,000 not-due rows spread over 30 days preloaded in ``scheduled_tasks``
  (then analysed); ours is run again at its highest sustainable rate (lower by 10 % steps
  until sustainable) and at the same half rate for the lag; the ratio against the empty
  table is reported.

Each step starts afresh: new worker processes, an emptied table (ours; the future rows stay
and the table is vacuumed) or a new database (pgqueuer). ``python -m bench.inflow [--smoke |
--quick] [--no-future] [--repeats N]`` runs it alone; repeats repeat the whole search and the
median highest rate is reported.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import peers
from bench.common import (
    Settings,
    analyze,
    create_scheduler_table,
    load_rows,
    log,
    median,
    percentile,
    pooled_engine,
    ratio,
    raw_connect,
    scratch_database,
    truncate,
    write_result,
)
from bench.crew import start_crew
from bench.environment import loadavg
from bench.inflow_peer_runner import paced, wait_empty, watch, worth_draining
from bench.peers import _ms
from bench.pipeline import least_squares_slope
from bench.worker import scheduler_worker

PROCS = 4
#: as ``bench.worker`` builds the defaults (no poll_using_…), the body recording due → start lag
DEFAULTS = {"strategy": "default", "threads": 10, "strict": False, "body": "record"}
BOUNDED_SLOPE = 0.05
#: a producer reaching less than this share of R makes the step producer-bound
ACHIEVED_SHARE = 0.95
#: the big future's rate steps below the empty table's highest sustainable rate
FUTURE_STEPS = (1.0, 0.9, 0.8)
RUNNER = peers.BENCH_DIR / "inflow_peer_runner.py"


@dataclass
class Plan:
    window_s: float
    start_rate: float
    bisections: int
    max_steps: int
    warmup_s: float
    drain_s: float
    future_rows: int


def plan_for(settings: Settings) -> Plan:
    return Plan(
        window_s=float(settings.size(20, 10, 2)),
        start_rate=float(settings.size(2500, 2000, 200)),
        bisections=settings.size(2, 1, 0),
        max_steps=settings.size(8, 6, 1),
        warmup_s=1.0 if not settings.smoke else 0.5,
        drain_s=float(settings.size(10, 5, 2)),
        future_rows=settings.size(1_000_000, 100_000, 2_000),
    )


# ----------------------------------------------------------------------------- the search
@dataclass
class RateSearch:
    """Doubling from ``start`` until a step fails (halving if the first fails), then bisecting
    between the highest pass and the lowest fail ``bisections`` times."""

    start: float
    bisections: int
    max_steps: int
    passed: float | None = None
    failed: float | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    _bisected: int = 0

    def next_rate(self) -> float | None:
        if len(self.steps) >= self.max_steps:
            return None
        if not self.steps:
            return self.start
        if self.failed is None:
            return self.passed * 2 if self.passed else None
        if self.passed is None:
            low = self.failed / 2
            return low if low >= self.start / 8 else None
        if self._bisected >= self.bisections:
            return None
        return round((self.passed + self.failed) / 2, -1)

    def record(self, step: dict[str, Any]) -> None:
        rate = step["rate"]
        if self.passed is not None and self.failed is not None:
            self._bisected += 1
        if step["sustainable"]:
            self.passed = max(self.passed or 0.0, rate)
        else:
            self.failed = rate if self.failed is None else min(self.failed, rate)
        self.steps.append(step)


# ----------------------------------------------------------------------------- verdict
def verdict(raw: dict[str, Any], rate: float, window: float) -> dict[str, Any]:
    """One step's figures from its raw samples, the same rule for both systems."""
    samples = raw.get("samples") or []
    fed = raw.get("producer") or {}
    achieved = fed.get("achieved_per_s") or 0.0
    half = [s for s in samples if s[0] >= window / 2]
    slope = least_squares_slope([s[0] for s in half], [s[1] for s in half])
    bounded = slope is not None and slope < BOUNDED_SLOPE * achieved
    producer_bound = achieved < ACHIEVED_SHARE * rate
    lags = raw.get("lags") or []
    at_end = samples[-1][1] if samples else None
    inserted = fed.get("inserted") or 0
    errors = list(raw.get("errors") or []) + ([raw["error"]] if raw.get("error") else [])
    return {
        "rate": rate,
        "achieved_per_s": achieved,
        "producer_bound": producer_bound,
        "producer_cpu_s": fed.get("cpu_s"),
        "producer_late_ticks": fed.get("late_ticks"),
        "backlog_slope_per_s": round(slope, 1) if slope is not None else None,
        "bounded": bounded,
        "sustainable": bounded and not producer_bound and not errors,
        "backlog_max": max((s[1] for s in samples), default=None),
        "backlog_end": at_end,
        "executed_per_s_in_window": round((inserted - at_end) / window, 1) if at_end is not None else None,
        "drained_after_s": raw.get("drained_after_s"),
        "executed": raw.get("executed"),
        "lag_n": len(lags),
        "lag_p50_ms": _ms(percentile(lags, 50)),
        "lag_p95_ms": _ms(percentile(lags, 95)),
        "lag_max_ms": _ms(max(lags) if lags else None),
        "errors": errors[:5],
        "samples": samples,
    }


def _brief(step: dict[str, Any]) -> str:
    tag = "sustainable" if step["sustainable"] else "producer-bound" if step["producer_bound"] else "NOT"
    return (
        f"{step['rate']:.0f}/s (achieved {step['achieved_per_s']}/s): {tag}; slope "
        f"{step['backlog_slope_per_s']}/s, backlog max {step['backlog_max']} end {step['backlog_end']}; "
        f"lag p50 {step['lag_p50_ms']} p95 {step['lag_p95_ms']} ms; producer cpu {step['producer_cpu_s']} s"
        + (f"; errors {step['errors']}" if step["errors"] else "")
    )


# ----------------------------------------------------------------------------- ours
def ours_producer(pipe: Any, go: Any, stop: Any, url: str, opts: dict[str, Any]) -> None:
    """Schedules through the public client, paced by ``inflow_peer_runner.paced``."""
    from ekbatan.distributed_jobs.scheduler import SchedulerClient, Tasks

    engine = pooled_engine(url, 2)
    task = Tasks.one_time("bench", dict).execute(lambda instance, ctx: None)
    client = SchedulerClient(engine, [task])
    prefix = str(opts["prefix"])
    with engine.connect():
        pass  # connected before the window opens, as pgqueuer's producer is

    def insert(count: int, first: int, stamp: float) -> None:
        due = datetime.fromtimestamp(stamp, UTC)
        data = {"due": stamp}
        client.schedule_batch([task.instance(f"{prefix}{first + i}", data) for i in range(count)], due)

    pipe.send({"event": "ready"})
    go.wait()
    report = paced(float(opts["rate"]), float(opts["seconds"]), insert)
    engine.dispose()
    pipe.send({"event": "report", **report})
    stop.wait()


def _inflow_backlog(conn: Any) -> int:
    # the inflow is due now; preloaded future rows are a day or more away
    row = conn.execute("SELECT count(*) FROM scheduled_tasks WHERE execution_time <= now()").fetchone()
    return int(row[0]) if row else 0


def ours_step(url: str, rate: float, plan: Plan, label: str) -> dict[str, Any]:
    """One window of ours: 4 default schedulers, one producer, the backlog watched."""
    workers = start_crew(scheduler_worker, [(url, {**DEFAULTS, "name": f"inflow-{i}"}) for i in range(PROCS)])
    feeder = start_crew(ours_producer, [(url, {"rate": rate, "seconds": plan.window_s, "prefix": label})])
    conn = raw_connect(url)
    try:
        workers.release()
        time.sleep(plan.warmup_s)
        feeder.release()
        samples = watch(lambda: _inflow_backlog(conn), plan.window_s)
        pipe = feeder.pipes[0]
        fed = pipe.recv() if pipe.poll(plan.window_s + 60) else {"error": "no producer report"}
        feeder.finish()
        at_end = int(samples[-1][1])
        drained = (
            wait_empty(lambda: _inflow_backlog(conn), plan.drain_s) if worth_draining(at_end, rate) else None
        )
        left = _inflow_backlog(conn)
    finally:
        conn.close()
        reports = workers.finish()
    return {
        "samples": samples,
        "producer": fed,
        "drained_after_s": drained,
        "left": left,
        "executed": sum(r.get("executed") or 0 for r in reports),
        "lags": [lag for r in reports for _, lag in r.get("samples", [])],
        "errors": [r["error"] for r in reports if "error" in r] + ([fed["error"]] if "error" in fed else []),
    }


def _reset(url: str, future: bool) -> None:
    """Empty the inflow between steps; the future rows stay, and the table is vacuumed so that
    every step starts without the previous one's dead rows."""
    if not future:
        truncate(url)
        return
    conn = raw_connect(url)
    try:
        conn.execute("DELETE FROM scheduled_tasks WHERE execution_time <= now() + interval '1 hour'")
    finally:
        conn.close()
    analyze(url)


# ----------------------------------------------------------------------------- pgqueuer
def peer_command(settings: Settings, rate: float, plan: Plan) -> list[str]:
    return [
        str(peers.peers_python(settings)),
        str(RUNNER),
        "--rate",
        f"{rate:g}",
        "--seconds",
        f"{plan.window_s:g}",
        "--procs",
        str(PROCS),
        "--warmup",
        f"{plan.warmup_s:g}",
        "--drain",
        f"{plan.drain_s:g}",
        "--pg",
        peers.PG_BASE,
    ]


def peer_step(settings: Settings, rate: float, plan: Plan) -> dict[str, Any]:
    return peers.run_command(peer_command(settings, rate, plan), timeout=plan.window_s + plan.drain_s + 180)


# ----------------------------------------------------------------------------- the run
class Bench:
    """Both systems' steps on one scratch database of ours (pgqueuer brings its own)."""

    def __init__(self, settings: Settings, url: str, plan: Plan) -> None:
        self.settings, self.url, self.plan = settings, url, plan
        self.steps_run = 0
        self.future = False

    def ours(self, rate: float, what: str) -> dict[str, Any]:
        self.steps_run += 1
        _reset(self.url, self.future)
        step = verdict(ours_step(self.url, rate, self.plan, f"s{self.steps_run}-"), rate, self.plan.window_s)
        log(f"inflow ours{' (future rows)' if self.future else ''} {what}: {_brief(step)}")
        return step

    def pgqueuer(self, rate: float, what: str) -> dict[str, Any]:
        step = verdict(peer_step(self.settings, rate, self.plan), rate, self.plan.window_s)
        log(f"inflow pgqueuer {what}: {_brief(step)}")
        return step


def _search_round(bench: Bench, with_peer: bool) -> dict[str, RateSearch]:
    plan = bench.plan
    searches = {"ours": RateSearch(plan.start_rate, plan.bisections, plan.max_steps)}
    if with_peer:
        searches["pgqueuer"] = RateSearch(plan.start_rate, plan.bisections, plan.max_steps)
    while True:
        moved = False
        for name, search in searches.items():  # ours, then pgqueuer: taking turns
            rate = search.next_rate()
            if rate is None:
                continue
            moved = True
            step = bench.ours(rate, "search") if name == "ours" else bench.pgqueuer(rate, "search")
            search.record(step)
        if not moved:
            return searches


def _summary(search: RateSearch) -> dict[str, Any]:
    return {
        "highest_sustainable_per_s": search.passed,
        "lowest_failed_per_s": search.failed,
        "steps": search.steps,
    }


def run(settings: Settings, future: bool = True) -> dict[str, Any]:
    plan = plan_for(settings)
    rounds = 1 if settings.smoke else max(1, settings.repeats)
    results: dict[str, Any] = {
        "procs": PROCS,
        "window_s": plan.window_s,
        "start_rate": plan.start_rate,
        "bisections": plan.bisections,
        "bounded_slope": BOUNDED_SLOPE,
        "achieved_share": ACHIEVED_SHARE,
        "rounds": rounds,
        "loadavg_start": loadavg(),
    }
    if not settings.wants("postgres"):
        results["status"] = "skipped: the inflow benchmark runs on PostgreSQL only"
        write_result(settings, "inflow", results)
        return results
    with_peer = peers.ensure_venv(settings)
    if not with_peer:
        results["pgqueuer_status"] = "unavailable: bench/.venv-peers does not exist"
        results["pgqueuer_command"] = " ".join(peer_command(settings, plan.start_rate, plan))
    per_round: list[dict[str, Any]] = []
    with scratch_database("postgres") as db:
        create_scheduler_table(db.url)
        bench = Bench(settings, db.url, plan)
        for r in range(rounds):
            searches = _search_round(bench, with_peer)
            this: dict[str, Any] = {name: _summary(s) for name, s in searches.items()}
            # the lag at half of each system's own highest sustainable rate, taking turns too
            # (from the start rate when nothing passed, so every part of the harness runs)
            for name, s in searches.items():
                half = (s.passed or plan.start_rate) / 2
                run_half = bench.ours if name == "ours" else bench.pgqueuer
                this[name]["half_rate"] = run_half(half, f"lag at half ({half:.0f}/s)")
            per_round.append(this)
            log(f"inflow round {r + 1}/{rounds} done")
        highest = median([r["ours"]["highest_sustainable_per_s"] for r in per_round])
        if future:
            results["future"] = _future_run(bench, highest, settings)
    results["per_round"] = per_round
    results["ours"] = _headline(per_round, "ours")
    if with_peer:
        results["pgqueuer"] = _headline(per_round, "pgqueuer")
        results["ours_over_pgqueuer"] = ratio(
            results["ours"]["highest_sustainable_per_s"], results["pgqueuer"]["highest_sustainable_per_s"]
        )
    results["loadavg_end"] = loadavg()
    write_result(settings, "inflow", results)
    return results


def _headline(per_round: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The median round's figures (by highest sustainable rate), every round's rate beside."""
    rates = [r[name]["highest_sustainable_per_s"] for r in per_round]
    ordered = sorted(per_round, key=lambda r: r[name]["highest_sustainable_per_s"] or 0.0)
    chosen = ordered[len(ordered) // 2][name]
    top = next((s for s in chosen["steps"] if s["rate"] == chosen["highest_sustainable_per_s"]), None)
    half = chosen.get("half_rate") or {}
    return {
        "highest_sustainable_per_s": chosen["highest_sustainable_per_s"],
        "rounds": rates,
        "achieved_at_highest_per_s": top["achieved_per_s"] if top else None,
        "producer_bound_steps": [s["rate"] for s in chosen["steps"] if s["producer_bound"]],
        "half_rate_per_s": half.get("rate"),
        "half_rate_achieved_per_s": half.get("achieved_per_s"),
        "half_rate_sustainable": half.get("sustainable"),
        "lag_p50_ms": half.get("lag_p50_ms"),
        "lag_p95_ms": half.get("lag_p95_ms"),
    }


def _future_run(bench: Bench, highest: float | None, settings: Settings) -> dict[str, Any]:
    """Ours again with the big future preloaded: at its highest sustainable rate, 10 % lower
    until sustainable, then the lag at the same half rate as on the empty table (from the
    start rate when nothing passed on the empty table)."""
    plan = bench.plan
    basis = highest or plan.start_rate
    truncate(bench.url)
    load_s = load_rows(
        bench.url, plan.future_rows, due_in=timedelta(days=1), spread=timedelta(days=30), prefix="f"
    )
    analyze(bench.url)
    log(f"inflow: {plan.future_rows} future rows loaded in {load_s:.1f} s and analysed")
    bench.future = True
    steps, passed = [], None
    for share in FUTURE_STEPS[: 1 if settings.smoke else None]:
        step = bench.ours(round(basis * share, -1) or basis * share, f"search at {share:.0%} of empty")
        steps.append(step)
        if step["sustainable"]:
            passed = step["rate"]
            break
    half = bench.ours(basis / 2, f"lag at half of empty's highest ({basis / 2:.0f}/s)")
    bench.future = False
    return {
        "rows": plan.future_rows,
        "load_s": round(load_s, 1),
        "steps": steps,
        "highest_sustainable_per_s": passed,
        "ratio_to_empty": ratio(passed, highest),
        "ratio_note": "≥ this: the search starts at the empty table's highest and only goes down",
        "half_rate": half,
    }


def main(argv: list[str]) -> int:
    import argparse
    import tempfile
    from pathlib import Path

    from bench.environment import snapshot_engine

    p = argparse.ArgumentParser(prog="python -m bench.inflow", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true")
    size.add_argument("--quick", action="store_true")
    p.add_argument("--no-future", action="store_true", help="skip the 1 M future rows part")
    p.add_argument("--repeats", type=int, default=1, help="whole searches; the median is reported")
    p.add_argument("--live-engine", action="store_true", help="import the engine from the work tree")
    args = p.parse_args(argv)
    settings = Settings(
        smoke=args.smoke,
        quick=args.quick,
        dbs=("postgres",),
        repeats=args.repeats,
        command="python -m bench.inflow " + " ".join(argv),
    )
    if not args.live_engine:
        # a folder of its own: bench/out/engine-snapshot may be in use by a `./run bench` run
        snapshot_engine(Path(tempfile.mkdtemp(prefix="bench-inflow-")))
    out = run(settings, future=not args.no_future)
    for name in ("ours", "pgqueuer"):
        if name in out:
            h = out[name]
            print(
                f"{name}: highest sustainable {h['highest_sustainable_per_s']}/s (rounds {h['rounds']}, achieved "
                f"{h['achieved_at_highest_per_s']}/s); at half ({h['half_rate_per_s']}/s) lag p50 "
                f"{h['lag_p50_ms']} ms p95 {h['lag_p95_ms']} ms"
            )
    if "ours_over_pgqueuer" in out:
        print(f"ours ÷ pgqueuer: {out['ours_over_pgqueuer']} (goal ≥ 2)")
    if "future" in out:
        f = out["future"]
        print(
            f"1 M future: highest sustainable {f['highest_sustainable_per_s']}/s, ratio to empty "
            f"{f['ratio_to_empty']} (goal ≥ 0.9); lag at half p50 {f['half_rate']['lag_p50_ms']} ms "
            f"p95 {f['half_rate']['lag_p95_ms']} ms"
        )
    print(f"load average {out['loadavg_start']} → {out['loadavg_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
