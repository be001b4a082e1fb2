"""The event pipeline against procrastinate on PostgreSQL: the same application work, two ways
of getting it to its handlers.

Ours: an action inserts one ``bench_items`` row and records one event in the same transaction;
three trivial handlers subscribe to it, so each event is three deliveries. The pipeline runs as
in production (``event_pipeline_jobs`` with default settings, handling enabled, in a
``JobRegistry``), in 2 processes. procrastinate (``bench/outbox_peer_runner.py``, in the peers'
venv): one transaction inserts the same row and defers three jobs (one per handler) on its own
connection, ``task.configure(connection=conn).defer(...)``; 2 worker processes with
``concurrency=10`` (as the peers benchmark runs it) and LISTEN/NOTIFY on (its default).

Cases, ours and procrastinate taking turns round by round:

* **end to end** — the workers are started and idle; then 4 writer threads of one spawned
  process run N application transactions; t0 = the writers' release, t1 = all 3 N deliveries
  done (ours: every notification ``SUCCEEDED``; procrastinate: every job ``succeeded``).
  deliveries/s = 3 N / (t1 − t0). Goal: ours ≥ 2 × procrastinate's.
* **latency** — the workers idle; another process runs 50 transactions one by one, 0.25 s apart;
  each handler records ``time.time()`` at its start, the harness the time right after the
  commit returned. p50/p95 over every delivery. Goal: ours' p95 ≤ procrastinate's.

``python -m bench.outbox_peer [--smoke|--quick] [--repeats N]`` runs it alone; it is also
``./run bench outbox_peer``.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import peers
from bench.common import BENCH_DIR, Settings, log, median, percentile, write_result
from bench.crew import start_crew
from bench.pipeline import latency_run
from bench.pipeline_app import (
    HANDLERS,
    WRITER_THREADS,
    Probe,
    pipeline_database,
    pipeline_worker,
    report_of,
    wait_for_counts,
    writer_worker,
)

PROCESSES = 2
RUNNER = BENCH_DIR / "outbox_peer_runner.py"
THROUGHPUT_GOAL = 2.0


def ours_end_to_end(events: int) -> dict[str, Any]:
    """2 pipeline processes idle; 4 writer threads run ``events`` actions; until all delivered."""
    with pipeline_database("postgres") as (url, eventlog):
        crew = start_crew(pipeline_worker, [(url, eventlog, {})] * PROCESSES)
        writers = start_crew(writer_worker, [(url, eventlog, {"count": events})])
        probe = Probe(url, eventlog)
        try:
            crew.release()
            # the writers' warm-up action is delivered first: both jobs are then running and idle
            warm = len(HANDLERS)
            wait_for_counts(probe, lambda c: c["succeeded"] >= warm, timeout=60, every=0.05)
            expected = warm + len(HANDLERS) * events
            t0 = writers.release()
            t1, after = wait_for_counts(
                probe, lambda c: c["succeeded"] >= expected, timeout=events / 10 + 120, every=0.05
            )
            w = report_of(writers, timeout=60)
            reports = crew.finish()
        finally:
            probe.close()
    deliveries = after["succeeded"] - warm
    seconds = t1 - t0
    out = {
        "events": events,
        "deliveries": deliveries,
        "expected": len(HANDLERS) * events,
        "seconds": round(seconds, 3),
        "deliveries_per_s": round(deliveries / seconds, 1),
        "writer_actions_per_s": round(w["actions"] / w["seconds"], 1) if w.get("seconds") else None,
        "job_failures": [m for r in reports for m in r.get("job_failures", [])],
        "error": w.get("error")
        or (w.get("errors") or None)
        or next((r["error"] for r in reports if r.get("error")), None),
    }
    log(
        f"outbox ours end to end: {deliveries} deliveries in {seconds:.2f} s = {out['deliveries_per_s']:.0f}/s "
        f"(writers {out['writer_actions_per_s']} actions/s)"
    )
    return out


def ours_latency(actions: int, spacing: float) -> dict[str, Any]:
    with pipeline_database("postgres") as (url, eventlog):
        return latency_run(
            url,
            eventlog,
            "postgres",
            wakeups=True,
            actions=actions,
            spacing=spacing,
            idle=2.0,
            processes=PROCESSES,
        )


def peer_command(settings: Settings, mode: str, events: int, spacing: float = 0.25) -> list[str]:
    return [
        str(peers.peers_python(settings)),
        str(RUNNER),
        "--mode",
        mode,
        "--events",
        str(events),
        "--procs",
        str(PROCESSES),
        "--concurrency",
        "10",
        "--writers",
        str(WRITER_THREADS),
        "--spacing",
        str(spacing),
        "--idle",
        "2.0" if mode == "latency" else "1.0",
        "--timeout",
        str(max(60, events // 20)),
        "--pg",
        peers.PG_BASE,
    ]


def peer_end_to_end(settings: Settings, events: int) -> dict[str, Any]:
    cmd = peer_command(settings, "throughput", events)
    out = peers.run_command(cmd, timeout=max(120, events / 10 + 120))
    log(f"outbox procrastinate end to end: {out.get('deliveries_per_s')}/s {out.get('error', '')}")
    return {**out, "command": " ".join(cmd)}


def peer_latency(settings: Settings, actions: int, spacing: float) -> dict[str, Any]:
    cmd = peer_command(settings, "latency", actions, spacing)
    out = peers.run_command(cmd, timeout=actions * spacing + 120)
    lat = out.pop("latencies", [])
    result = {
        **out,
        "command": " ".join(cmd),
        "n": len(lat),
        "expected": len(HANDLERS) * actions,
        "p50_ms": _ms(percentile(lat, 50)),
        "p95_ms": _ms(percentile(lat, 95)),
        "max_ms": _ms(max(lat) if lat else None),
    }
    log(f"outbox procrastinate latency: p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms (n={len(lat)})")
    return result


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def run(settings: Settings) -> dict[str, Any]:
    events = settings.size(5_000, 2_000, 60)
    actions = settings.size(50, 30, 5)
    spacing = 0.25 if not settings.smoke else 0.1
    repeats = 1 if settings.smoke else settings.repeats
    results: dict[str, Any] = {
        "events": events,
        "handlers": len(HANDLERS),
        "writer_threads": WRITER_THREADS,
        "processes": PROCESSES,
        "latency_actions": actions,
        "latency_spacing_s": spacing,
        "throughput_goal": THROUGHPUT_GOAL,
        "repeats": repeats,
    }
    if not settings.wants("postgres"):
        results["status"] = "skipped: procrastinate runs on PostgreSQL only"
        write_result(settings, "outbox_peer", results)
        return results
    available = peers.ensure_venv(settings)
    rounds: list[dict[str, Any]] = []
    for r in range(repeats):
        one: dict[str, Any] = {"ours_end_to_end": ours_end_to_end(events)}
        if available:
            one["peer_end_to_end"] = peer_end_to_end(settings, events)
        one["ours_latency"] = ours_latency(actions, spacing)
        if available:
            one["peer_latency"] = peer_latency(settings, actions, spacing)
        rounds.append(one)
        log(f"outbox round {r + 1}/{repeats} done")
    results["rounds"] = rounds
    results["status"] = "ok" if available else "peer unavailable: bench/.venv-peers does not exist"
    results["summary"] = summarize(rounds)
    if not available:
        results["peer_commands"] = [
            " ".join(peer_command(settings, "throughput", events)),
            " ".join(peer_command(settings, "latency", actions, spacing)),
        ]
    write_result(settings, "outbox_peer", results)
    return results


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, and the two ratios per round (ours ÷ procrastinate's rate;
    procrastinate's p95 ÷ ours, so ≥ 1 meets both goals)."""

    def figures(case: str, key: str) -> list[float]:
        return [r[case][key] for r in rounds if r.get(case, {}).get(key) is not None]

    rate_ratios = [
        r["ours_end_to_end"]["deliveries_per_s"] / r["peer_end_to_end"]["deliveries_per_s"]
        for r in rounds
        if r.get("peer_end_to_end", {}).get("deliveries_per_s")
    ]
    p95_ratios = [
        r["peer_latency"]["p95_ms"] / r["ours_latency"]["p95_ms"]
        for r in rounds
        if r.get("peer_latency", {}).get("p95_ms") and r["ours_latency"].get("p95_ms")
    ]
    cases = (
        ("end_to_end", "deliveries_per_s"),
        ("end_to_end", "writer_actions_per_s"),
        ("latency", "p50_ms"),
        ("latency", "p95_ms"),
    )
    medians = {
        f"{side}_{key}": median(figures(f"{side}_{case}", key))
        for side in ("ours", "peer")
        for case, key in cases
    }
    return {
        **medians,
        "rate_ratios": [round(x, 2) for x in rate_ratios],
        "rate_ratio": _round(median(rate_ratios)),
        "p95_ratios": [round(x, 2) for x in p95_ratios],
        "p95_ratio": _round(median(p95_ratios)),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


if __name__ == "__main__":
    from bench.__main__ import main

    sys.exit(main(["outbox_peer", "--db", "postgres", *sys.argv[1:]]))
