"""RESULTS.md sections for the work as it grows: big backlogs (``backlog``), steady inflow
(``inflow``) and the event pipeline against procrastinate (``outbox_peer``).

Each section reads its benchmark's JSON from ``bench/out`` and prints every figure beside its
baseline from the same run; ``goals`` adds their rows to the goals table at the top.
"""

from __future__ import annotations

from typing import Any

Row = tuple[str, str, str, float | None]


def _f(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


def _r(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _rounds(values: list[float | None]) -> str:
    return ", ".join(_r(v) for v in values)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _against(goal: str, figure: dict[str, Any] | None, bar: float, unit: str = "") -> list[Row]:
    """A goal row for a per-round ratio ``figure`` that must reach ``bar``."""
    if not figure:
        return []
    median = figure["median"]
    return [
        (
            goal,
            f"{_r(median)}{unit} (rounds {_rounds(figure['rounds'])})",
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
        rows += _against(
            f"PG, defaults, 4 procs, {first:,} due, start-up included: ≥ 2 × pgqueuer's defaults",
            b["ours_over_pgqueuer"].get(f"{first} from spawn"),
            2.0,
            " ×",
        )
    return rows


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
        "in the same round. Median of {b['repeats']} round(s); every round listed.",
        "",
    ]
    rows = []
    for key, fig in b["figures"].items():
        runs = ", ".join(_f(r.get("exec_per_s")) for r in fig["runs"])
        rows.append([key, f"**{_f(fig['exec_per_s'])}**", runs])
    out += _table(["configuration", "exec/s", "rounds"], rows)
    out += ["", "Ratios, per round (same round's baseline):", ""]
    ratios = [[name, _r(v["median"]), _rounds(v["rounds"])] for name, v in b["curves"].items()]
    ratios += [
        [f"ours ÷ pgqueuer at {name}", _r(v["median"]), _rounds(v["rounds"])]
        for name, v in b["ours_over_pgqueuer"].items()
    ]
    out += _table(["ratio", "median", "rounds"], ratios)
    out += ["", f"Command: `{b.get('command') or './run bench backlog'}`", ""]
    return out


SECTIONS = (section_backlog,)
