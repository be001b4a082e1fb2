"""RESULTS.md sections for what the engine costs beside its speed: poll time and rate against
the table's size (``scale``), idle statements and memory (``footprint``), ``schedule_batch``
(``bulk``) and where a worker's Python time goes (``profile``)."""

from __future__ import annotations

from typing import Any

from bench.report_format import num, r2, ratio_of, table


def section_scale(d: dict[str, Any]) -> list[str]:
    sc = d.get("scale")
    if not sc:
        return []
    small, big = sc.get("future_rows", [None, None])
    out = [
        "## 5. Scale: future rows in the table",
        "",
        f"`python -m bench scale`: {num(small)} vs {num(big)} future rows; poll statements through the engine's "
        f"repository (median of many calls, ms); executions/s of {num(sc.get('due_rows'))} due rows on top "
        f"({sc.get('procs')} processes, threads 10, median of {sc.get('repeats')}); then {num(sc.get('burst_rows'))} due at once.",
        "",
    ]
    rows = []
    for dialect, per in sc.get("dialects", {}).items():
        s, b = per["sizes"][str(small)], per["sizes"][str(big)]
        for key in s["queries"]:
            rows.append(
                [
                    dialect,
                    key.removesuffix("_ms"),
                    num(s["queries"][key], 3),
                    num(b["queries"].get(key), 3),
                    f"**{r2(per['ratios'].get(key))}**",
                ]
            )
        for strat in s["exec_per_s"]:
            rows.append(
                [
                    dialect,
                    f"exec/s ({strat})",
                    num(s["exec_per_s"][strat]),
                    num(b["exec_per_s"][strat]),
                    f"**{r2(per['ratios'].get('exec_per_s_' + strat))}**",
                ]
            )
    out += table(["db", "figure", f"{num(small)} future", f"{num(big)} future", "ratio big/small"], rows)
    out.append("")
    rows = []
    for dialect, per in sc.get("dialects", {}).items():
        burst = per.get("burst", {})
        rows.append(
            [
                dialect,
                num(burst.get("rows")),
                burst.get("strategy", "–"),
                f"**{num(burst.get('exec_per_s'))}**",
                r2(burst.get("ratio_to_small")),
            ]
        )
    out += table(["db", "due at once", "strategy", "exec/s", f"× with {num(sc.get('due_rows'))} due"], rows)
    return [*out, ""]


def section_footprint(d: dict[str, Any]) -> list[str]:
    fp = d.get("footprint")
    if not fp:
        return []
    out = [
        "## 6. Footprint",
        "",
        f"`python -m bench footprint`: one scheduler with default settings idle for {fp.get('idle_window_s')} s on an "
        "empty table; statements counted by an SQLAlchemy `before_cursor_execute` listener "
        "(`pg_stat_statements` is not preloaded here); PG cross-check: `pg_stat_database` transactions over the "
        "process's whole life (start-up and stop included). RSS from /proc; baseline: a bare process with SQLAlchemy, "
        f"the driver and one open connection. Under load: peak RSS draining {num(fp.get('load_executions'))} executions.",
        "",
    ]
    rows = []
    for dialect, per in fp.get("dialects", {}).items():
        idle, bare, load = per.get("idle", {}), per.get("bare", {}), per.get("load", {})
        rows.append(
            [
                dialect,
                f"**{num(idle.get('statements_per_s'), 2)}**",
                num(idle.get("pg_xacts_per_s_lifetime"), 2),
                num(bare.get("rss_mb"), 1),
                f"**{num(idle.get('rss_mb'), 1)}** ({r2(ratio_of(idle.get('rss_mb'), bare.get('rss_mb')))} × bare)",
                f"**{num(load.get('rss_peak_mb'), 1)}** ({r2(ratio_of(load.get('rss_peak_mb'), bare.get('rss_mb')))} × bare)"
                if load
                else "–",
                str(idle.get("threads")),
            ]
        )
    out += table(
        [
            "db",
            "idle statements/s",
            "PG xacts/s (lifetime)",
            "bare RSS MB",
            "idle RSS MB",
            "peak RSS under load MB",
            "threads",
        ],
        rows,
    )
    return [*out, ""]


def section_bulk(d: dict[str, Any]) -> list[str]:
    bk = d.get("bulk")
    if not bk:
        return []
    pgq = next(
        (r for r in d.get("peers", {}).get("rows", []) if r["peer"] == "pgqueuer" and r.get("enqueue_per_s")),
        None,
    )
    out = [
        "## 7. Bulk scheduling",
        "",
        f"`python -m bench bulk`: {num(bk.get('tasks'))} one-time instances per call, median of {bk.get('repeats')}; "
        "baselines: plain driver multi-row INSERT (1,000 rows/statement) and executemany, same rows, one transaction; "
        f"pgqueuer's bulk enqueue in the same run: {num(pgq['enqueue_per_s']) if pgq else '–'}/s.",
        "",
    ]
    rows = []
    for dialect, row in bk.get("dialects", {}).items():
        sb = row["schedule_batch"]["per_s"]
        rows.append(
            [
                dialect,
                f"**{num(sb)}**",
                num(row["raw_multirow"]["per_s"]),
                num(row["raw_executemany"]["per_s"]),
                r2(ratio_of(sb, row["raw_multirow"]["per_s"])),
                r2(ratio_of(sb, pgq["enqueue_per_s"])) if pgq and dialect == "postgres" else "–",
            ]
        )
    out += table(
        [
            "db",
            "schedule_batch tasks/s",
            "raw multi-row/s",
            "raw executemany/s",
            "× raw multi-row",
            "× pgqueuer enqueue",
        ],
        rows,
    )
    return [*out, ""]


def section_profile(d: dict[str, Any]) -> list[str]:
    pr = d.get("profile")
    if not pr:
        return []
    out = ["## 8. Profile of the hot path", ""]
    if pr.get("status") != "ok":
        return [*out, f"Status: {pr.get('status')}", ""]
    out += [
        f"`python -m bench profile`: py-spy (`--gil --nonblocking`, 250 Hz) attached to one scheduler process "
        f"(PG, threads 10, batched) draining {num(pr.get('executions'))} executions. Shares are of the samples in which "
        "a thread of the process held the GIL; 'GIL busy' = samples / (rate × drain time).",
        "",
    ]
    for run in pr.get("runs", []):
        out += [
            f"**{run['strategy']}** — {num(run['exec_per_s_while_profiled'])} exec/s while profiled, "
            f"{run['samples']} samples, GIL busy {num(run.get('gil_busy_pct'), 1)} %. By layer (self time): "
            + ", ".join(f"{k} {v} %" for k, v in run["layers_pct"].items()),
            "",
        ]
        rows = [[name, f"{pct} %"] for name, pct in run["top_engine_inclusive_pct"][:10]]
        out += table(["engine function (inclusive)", "share"], rows)
        out.append("")
        rows = [[name, f"{pct} %"] for name, pct in run["top_self_pct"][:10]]
        out += table(["innermost frame (self)", "share"], rows)
        out.append("")
    return out
