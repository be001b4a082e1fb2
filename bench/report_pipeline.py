"""The RESULTS.md section of the local event handler pipeline (``pipeline``)."""

from __future__ import annotations

from typing import Any

from bench.report_format import num, r2, ratio_of, table, verdict


def section_pipeline(d: dict[str, Any]) -> list[str]:
    pl = d.get("pipeline")
    if not pl:
        return []
    goal = pl.get("ratio_goal", 1.5)
    handlers = pl.get("handlers", 3)
    out = [
        "## 9. Local event handler pipeline",
        "",
        f"`python -m bench pipeline`: one shard; an action inserting one row and recording one event, executed by "
        f"{pl.get('writer_threads')} threads of one process through an `ActionExecutor`; {handlers} trivial handlers "
        "per event. The pipeline runs as in production: `event_pipeline_jobs` with default settings (handling "
        "enabled) in a real `JobRegistry` (default poll interval) on a jobs pool of its own, in a process started, "
        "connected and ready before it is released. The verdict column is measured ÷ goal "
        "(for an upper bound, goal ÷ measured); ≥ 1.00 meets it.",
        "",
        f"**Drain vs writers** ({num(pl.get('events'))} events pre-loaded by the writers — their rate is the baseline; "
        f"then the pipeline is released and timed until all {handlers} × events notifications are SUCCEEDED; "
        f"median ratio of {pl.get('repeats')} run(s)). Goal: deliveries/s ÷ ({handlers} × writer events/s) ≥ {goal}.",
        "",
    ]
    rows = []
    for dialect, per in pl.get("dialects", {}).items():
        r = per.get("drain")
        if not r:
            continue
        runs = ", ".join(r2(x.get("ratio")) for x in r.get("runs", []))
        rows.append(
            [
                dialect,
                f"{num(r['writer_events_per_s'])} / {num(r['writer_actions_per_s'])}",
                f"**{num(r['deliveries_per_s'])}**",
                f"{num(r['drain_seconds'], 1)} s",
                f"{num(r['first_delivery_s'], 2)} s",
                num(r.get("deliveries_per_s_after_first")),
                f"**{r2(r['ratio'])}** ({runs})",
                verdict(ratio_of(r["ratio"], goal)),
                str(len(r.get("job_failures") or [])),
            ]
        )
    out += table(
        [
            "db",
            "writers events/s / actions/s",
            "deliveries/s",
            "drain",
            "first delivery",
            "deliveries/s after first",
            f"÷ ({handlers} × writers) (runs)",
            f"vs goal {goal}",
            "failed job runs",
        ],
        rows,
    )
    out += [
        "",
        f"**Writers and pipeline at once** for {num(pl.get('concurrent_seconds'))} s; backlog = "
        f"{handlers} × undelivered events + open notifications, sampled every 0.5 s; bounded = its least-squares "
        "slope over the second half of the window is under 5 % of the arrival rate.",
        "",
    ]
    rows = []
    for dialect, per in pl.get("dialects", {}).items():
        c = per.get("concurrent")
        if not c:
            continue
        rows.append(
            [
                dialect,
                num(c.get("writer_events_per_s")),
                num(c.get("arrival_deliveries_per_s")),
                num(c.get("delivered_per_s_while_writing")),
                num(c.get("backlog_max")),
                num(c.get("backlog_end_of_writing")),
                num(c.get("backlog_slope_per_s"), 1),
                "**yes**" if c.get("bounded") else "**no**",
                f"{num(c.get('drain_after_writers_s'), 1)} s",
                str(len(c.get("job_failures") or [])),
            ]
        )
    out += table(
        [
            "db",
            "writers events/s",
            "arrivals deliveries/s",
            "delivered/s while writing",
            "backlog max",
            "backlog at end",
            "slope /s (2nd half)",
            "bounded",
            "drain after writers",
            "failed job runs",
        ],
        rows,
    )
    out += [
        "",
        f"**Latency commit → handler start**, idle system: {pl.get('latency_actions')} actions executed one by one, "
        f"{pl.get('latency_spacing_s')} s apart, by another process than the pipeline's; commit time = right after "
        f"`execute()` returns; every (event, handler) start counts. Goals: p95 ≤ poll delay (1 s) + 100 ms; "
        "≤ 50 ms on PostgreSQL with wake-ups. `wakeups off` (both builders' `.wakeups(False)`) is the baseline "
        "showing what the LISTEN/NOTIFY hint buys.",
        "",
    ]
    rows = []
    pg_off = next(
        (r for r in pl.get("dialects", {}).get("postgres", {}).get("latency", []) if not r.get("wakeups")),
        None,
    )
    for dialect, per in pl.get("dialects", {}).items():
        for r in per.get("latency", []):
            vs_off = (
                r2(ratio_of(r["p95_ms"], pg_off["p95_ms"]))
                if pg_off and dialect == "postgres" and r.get("wakeups")
                else "–"
            )
            rows.append(
                [
                    dialect,
                    "on" if r.get("wakeups") else "off",
                    f"{r['n']}/{r['expected']}",
                    num(r["p50_ms"], 1),
                    f"**{num(r['p95_ms'], 1)}**",
                    num(r["max_ms"], 1),
                    f"{num(r['goal_ms'])} ms",
                    verdict(ratio_of(r["goal_ms"], r["p95_ms"])),
                    vs_off,
                ]
            )
    out += table(
        ["db", "wake-ups", "n", "p50 ms", "p95 ms", "max ms", "goal p95", "verdict", "p95 ÷ wake-ups off"],
        rows,
    )
    return [*out, ""]
