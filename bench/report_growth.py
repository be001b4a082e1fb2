"""RESULTS.md sections for the work as it grows: big backlogs (``backlog``), steady inflow
(``inflow``) and the event pipeline against procrastinate (``outbox_peer``).

Each section reads its benchmark's JSON from ``bench/out`` and prints every figure beside its
baseline from the same run; ``goals`` adds their rows to the goals table at the top.
"""

from __future__ import annotations

from typing import Any

from bench.report_format import num, r2, table

Row = tuple[str, str, str, float | None]


def _rounds(values: list[float | None]) -> str:
    return ", ".join(r2(v) for v in values)


def _against(goal: str, figure: dict[str, Any] | None, bar: float, unit: str = "") -> list[Row]:
    """A goal row for a per-round ratio ``figure`` that must reach ``bar``."""
    if not figure:
        return []
    median = figure["median"]
    return [
        (
            goal,
            f"{r2(median)}{unit} (rounds {_rounds(figure['rounds'])})",
            f"{bar:.2f}{unit}",
            None if median is None else median / bar,
        )
    ]


def goals(d: dict[str, Any]) -> list[Row]:
    """(goal, measured, baseline, ratio against the goal's bar; ≥ 1 met)."""
    rows: list[Row] = []
    b = d.get("backlog")
    if b:
        first, last = b["sizes"][0], b["sizes"][-1]
        for dialect in ("postgres", "mariadb"):
            rows += _against(
                f"{dialect}, defaults, 4 procs: {last:,} due at once ≥ 80 % of the rate at {first:,}",
                b["curves"].get(f"{dialect} {last} / {first}"),
                0.8,
            )
        rows += _against(
            f"MariaDB's curve within 80 % of PostgreSQL's at {last:,}",
            b["curves"].get(f"mariadb curve / postgres curve at {last}"),
            0.8,
        )
        # the drain is timed from the release of the ready processes, each of which then starts
        # its scheduler: the scheduler's start-up (the first poll's strategy choice, claim
        # sizing's warm-up) is inside it
        rows += _against(
            f"PG, defaults, 4 procs, {first:,} due, the schedulers' start-up included: ≥ 2 × pgqueuer's defaults",
            b["ours_over_pgqueuer"].get(f"{first}"),
            2.0,
            " ×",
        )
        spawned = b["ours_over_pgqueuer"].get(f"{first} from spawn")
        if spawned:
            # no goal: the interpreter and the imports (SQLAlchemy and psycopg for us, asyncpg and
            # pgqueuer for the peer) are the libraries' cost more than ours
            rows.append(
                (
                    "… timed from the processes' spawn (interpreter, imports, connections too; for reading, no goal)",
                    f"{r2(spawned['median'])} × (rounds {_rounds(spawned['rounds'])})",
                    "–",
                    None,
                )
            )
    f = d.get("inflow")
    if f and f.get("ours_over_pgqueuer") is not None:
        ratio = f["ours_over_pgqueuer"]
        steps = f["ours"].get("producer_bound_steps") or []
        bound = f" (producer-bound at {', '.join(num(x) for x in steps)}/s)" if steps else ""
        rows.append(
            (
                "PG, steady inflow, 4 procs, defaults: highest sustainable rate ≥ 2 × pgqueuer's",
                f"{num(f['ours']['highest_sustainable_per_s'])}/s{bound}",
                f"2 × {num(f['pgqueuer']['highest_sustainable_per_s'])}/s",
                ratio / 2,
            )
        )
        future = f.get("future") or {}
        if future.get("ratio_to_empty") is not None:
            rows.append(
                (
                    "… with 1 M future rows: no more than 10 % slower",
                    f"{num(future['highest_sustainable_per_s'])}/s = {r2(future['ratio_to_empty'])} of empty",
                    "0.90",
                    future["ratio_to_empty"] / 0.9,
                )
            )
    o = d.get("outbox_peer")
    sm = (o or {}).get("summary") or {}
    if sm.get("rate_ratio") is not None:
        rows.append(
            (
                "PG, 1 event × 3 handlers, 4 writers, 2 procs: deliveries/s ≥ 2 × procrastinate's",
                f"{num(sm['ours_deliveries_per_s'])}/s (rounds {_rounds(sm['rate_ratios'])} ×)",
                f"2 × {num(sm['peer_deliveries_per_s'])}/s",
                sm["rate_ratio"] / 2,
            )
        )
    if sm.get("p95_ratio") is not None:
        rows.append(
            (
                "PG, idle, commit → handler start p95 ≤ procrastinate's",
                f"{num(sm['ours_p95_ms'], 1)} ms",
                f"{num(sm['peer_p95_ms'], 1)} ms",
                sm["p95_ratio"],
            )
        )
    return rows


def section_outbox_peer(d: dict[str, Any]) -> list[str]:
    o = d.get("outbox_peer")
    if not o or not o.get("rounds"):
        return []
    sm = o["summary"]
    out = [
        "## The event pipeline against procrastinate (PostgreSQL)",
        "",
        f"`bench/outbox_peer.py`: the same application transaction both ways — one `bench_items` row, and "
        f"either one event with {o['handlers']} handlers (ours: `event_pipeline_jobs`, default settings, "
        f"handling enabled, in a `JobRegistry`) or {o['handlers']} procrastinate jobs deferred on the "
        "transaction's own connection (`task.configure(connection=conn).defer(...)`, worker concurrency 10, "
        f"LISTEN/NOTIFY on). {o['processes']} worker processes each. **End to end**: the workers idle, then "
        f"{o['writer_threads']} writer threads of one process run {num(o['events'])} transactions; timed from "
        "the writers' release until every delivery is done. **Latency**: the workers idle, another process "
        f"runs {o['latency_actions']} transactions {o['latency_spacing_s']} s apart; handler start − the time "
        f"the commit returned, over every delivery. Ours and procrastinate take turns; median of "
        f"{o['repeats']} round(s).",
        "",
    ]
    rows = [
        [
            "ours",
            f"**{num(sm['ours_deliveries_per_s'])}**",
            num(sm["ours_writer_actions_per_s"]),
            f"{num(sm['ours_p50_ms'], 1)} / **{num(sm['ours_p95_ms'], 1)}**",
        ],
        [
            "procrastinate",
            f"**{num(sm['peer_deliveries_per_s'])}**",
            num(sm["peer_writer_actions_per_s"]),
            f"{num(sm['peer_p50_ms'], 1)} / **{num(sm['peer_p95_ms'], 1)}**",
        ],
    ]
    out += table(["", "deliveries/s end to end", "writer transactions/s", "latency p50 / p95 ms"], rows)
    out += [
        "",
        f"Ours ÷ procrastinate, deliveries/s: **{r2(sm['rate_ratio'])}** (rounds {_rounds(sm['rate_ratios'])}); "
        f"procrastinate's p95 ÷ ours: **{r2(sm['p95_ratio'])}** (rounds {_rounds(sm['p95_ratios'])}).",
        "",
        f"Command: `{o.get('command') or './run bench outbox_peer'}`",
        "",
    ]
    return out


def section_inflow(d: dict[str, Any]) -> list[str]:
    f = d.get("inflow")
    if not f:
        return []
    out = [
        "## Steady inflow (PostgreSQL)",
        "",
        f"`bench/inflow.py`: one producer process schedules due-now rows at a fixed rate R (R/100 every 10 ms; "
        f"ours `schedule_batch`, pgqueuer `enqueue` with lists) while {f['procs']} worker processes drain, "
        f"defaults of both; {num(f['window_s'], 0)} s per step; sustainable = the producer achieved ≥ "
        f"{num(100 * f['achieved_share'], 0)} % of R and the backlog's slope over the second half < "
        f"{num(100 * f['bounded_slope'], 0)} % of the rate. R doubles from {num(f['start_rate'])}/s until a step "
        f"fails, then {f['bisections']} bisections, ours and pgqueuer taking turns. Lag = handler start − due "
        "time at half of each system's own highest rate. Load average "
        f"{f.get('loadavg_start')} at the start, {f.get('loadavg_end')} at the end.",
        "",
    ]
    rows = []
    for name in ("ours", "pgqueuer"):
        s = f.get(name) or {}
        rows.append(
            [
                name,
                f"**{num(s.get('highest_sustainable_per_s'))}**",
                num(s.get("achieved_at_highest_per_s")),
                ", ".join(num(x) for x in s.get("producer_bound_steps") or []) or "–",
                num(s.get("half_rate_per_s")),
                f"{num(s.get('lag_p50_ms'), 1)} / {num(s.get('lag_p95_ms'), 1)}",
            ]
        )
    out += table(
        [
            "",
            "highest sustainable /s",
            "achieved /s",
            "producer-bound steps /s",
            "half rate /s",
            "lag p50 / p95 ms",
        ],
        rows,
    )
    out += ["", f"Ours ÷ pgqueuer: **{r2(f.get('ours_over_pgqueuer'))}**.", ""]
    future = f.get("future")
    if future:
        half = future.get("half_rate") or {}
        out += [
            f"With {num(future['rows'])} future rows (loaded in {future['load_s']} s, analysed): ours sustained "
            f"{num(future.get('highest_sustainable_per_s'))}/s, {r2(future.get('ratio_to_empty'))} of the empty "
            f"table ({future.get('ratio_note', '')}); lag at {num(half.get('rate'))}/s p50 "
            f"{num(half.get('lag_p50_ms'), 1)} ms, p95 {num(half.get('lag_p95_ms'), 1)} ms.",
            "",
        ]
    out += [f"Command: `{f.get('command') or './run bench inflow'}`", ""]
    return out


def section_backlog(d: dict[str, Any]) -> list[str]:
    b = d.get("backlog")
    if not b:
        return []
    sizes = b["sizes"]
    out = [
        "## Backlog: the rate as the work due at once grows",
        "",
        f"`bench/backlog.py`: {', '.join(f'{n:,}' for n in sizes)} trivial one-time executions due at once, "
        f"drained by {b['procs']} scheduler processes with the defaults (threads 10), the table **not analysed** "
        "after the load (as a burst leaves it); pgqueuer's defaults (4 processes, its bulk enqueue) take turns "
        'with ours up to 100 k. "from spawn" times the drain from the processes\' start (interpreter, imports, '
        f"connections). The curve's baseline is the mean of the 20 k drains before and after the bigger sizes "
        f"in the same round. Median of {b['repeats']} round(s); every round listed.",
        "",
    ]
    rows = []
    for key, fig in b["figures"].items():
        runs = ", ".join(num(r.get("exec_per_s")) for r in fig["runs"])
        rows.append([key, f"**{num(fig['exec_per_s'])}**", runs])
    out += table(["configuration", "exec/s", "rounds"], rows)
    out += ["", "Ratios, per round (same round's baseline):", ""]
    ratios = [[name, r2(v["median"]), _rounds(v["rounds"])] for name, v in b["curves"].items()]
    ratios += [
        [f"ours ÷ pgqueuer at {name}", r2(v["median"]), _rounds(v["rounds"])]
        for name, v in b["ours_over_pgqueuer"].items()
    ]
    out += table(["ratio", "median", "rounds"], ratios)
    out += ["", f"Command: `{b.get('command') or './run bench backlog'}`", ""]
    return out


SECTIONS = (section_backlog, section_inflow, section_outbox_peer)
