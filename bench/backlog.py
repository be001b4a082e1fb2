"""Backlog: does the drain rate hold as the work due at once grows?

Users schedule bursts: a nightly import puts a million executions in the table at once. For
20 k, 100 k and 1 M trivial one-time executions due at once, drained by 4 scheduler processes
with the defaults (``Scheduler.create(engine, task).threads(10).build()``), on PostgreSQL and
MariaDB:

* the table is **not analysed** after the load, as a burst leaves it (autovacuum gets to it
  when it does); the throughput benchmark analyses first, this one does not;
* executions/s = N / (t1 − t0), t0 = release of the ready processes, t1 = nothing due left
  (the throughput harness, ``bench.throughput.run_once``);
* the curve: the rate at N ÷ the rate at 20 k in the same round, 20 k being drained before
  the bigger sizes and again after them (the mean of both; goal at 1 M: ≥ 0.8), and
  MariaDB's curve ÷ PostgreSQL's (goal: ≥ 0.8 at each size);
* the peer on PostgreSQL: pgqueuer's defaults (4 processes, its own bulk enqueue, not analysed
  either) at 20 k and 100 k, taking turns with ours; at 1 M it would take a quarter of an hour,
  so ours runs alone there;
* start-up included: the 20 k drain timed from the moment the processes are spawned
  (interpreter, imports, build, first connections), ours and pgqueuer's (goal: ≥ 2 ×).

Each round runs every configuration once, sizes interleaved with the peer; the median round is
reported with every round beside it.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from bench import peers
from bench.common import Settings, create_scheduler_table, log, median, ratio, scratch_database, write_result
from bench.throughput import run_once

PROCS = 4
DEFAULTS = {"strategy": "default", "threads": 10, "strict": False, "procs": PROCS}


def sizes(settings: Settings) -> list[int]:
    if settings.smoke:
        return [200, 1_000]
    if settings.quick:
        return [20_000, 100_000]
    return [20_000, 100_000, 1_000_000]


def peer_sizes(all_sizes: list[int]) -> list[int]:
    # pgqueuer drains about 1 k/s from a big backlog: 1 M would take a quarter of an hour
    return [n for n in all_sizes if n <= 100_000]


def ours(url: str, n: int, from_spawn: bool = False) -> dict[str, Any]:
    out = run_once(url, n, DEFAULTS, timeout=max(120.0, n / 500), analyze_first=False, from_spawn=from_spawn)
    return {k: out[k] for k in ("exec_per_s", "seconds", "left", "load_s", "errors") if k in out}


def pgqueuer(settings: Settings, n: int, from_spawn: bool = False) -> dict[str, Any]:
    cmd = peers.throughput_command(settings, "pgqueuer", PROCS, n, from_spawn=from_spawn)
    out = peers.run_command(cmd, timeout=max(300.0, n / 200))
    return {k: out.get(k) for k in ("exec_per_s", "seconds", "left", "error")}


def run(settings: Settings) -> dict[str, Any]:
    repeats = 1 if settings.smoke else settings.repeats
    all_sizes = sizes(settings)
    with_peer = settings.wants("postgres") and peers.ensure_venv(settings)
    rounds: dict[str, list[dict[str, Any]]] = {}

    def record(key: str, out: dict[str, Any]) -> None:
        rounds.setdefault(key, []).append(out)
        log(f"backlog [{key}] round {len(rounds[key])}/{repeats}: {out.get('exec_per_s')}/s")

    with ExitStack() as stack:
        opened = {
            d: stack.enter_context(scratch_database(d)) for d in ("postgres", "mariadb") if settings.wants(d)
        }
        for db in opened.values():
            create_scheduler_table(db.url)
        for _ in range(repeats):
            for n in all_sizes:
                for dialect, db in opened.items():
                    record(f"{dialect} ours {n}", ours(db.url, n))
                if with_peer and n in peer_sizes(all_sizes):
                    record(f"postgres pgqueuer {n}", pgqueuer(settings, n))
            # the smallest size again after the biggest: the curve's baseline is the mean of
            # both, so a host that grew busier or quieter during the long drains tilts it less
            for dialect, db in opened.items():
                record(f"{dialect} ours {all_sizes[0]} again", ours(db.url, all_sizes[0]))
            if "postgres" in opened:
                first = all_sizes[0]
                record(
                    f"postgres ours {first} from spawn", ours(opened["postgres"].url, first, from_spawn=True)
                )
                if with_peer:
                    record(
                        f"postgres pgqueuer {first} from spawn", pgqueuer(settings, first, from_spawn=True)
                    )

    def rates(key: str) -> list[float | None]:
        return [r.get("exec_per_s") for r in rounds.get(key, [])]

    def per_round(a: str, b: str) -> list[float | None]:
        return [ratio(x, y) for x, y in zip(rates(a), rates(b), strict=False)]

    first = all_sizes[0]
    figures: dict[str, Any] = {}
    for key in rounds:
        figures[key] = {"exec_per_s": median([r for r in rates(key) if r]), "runs": rounds[key]}
    curves: dict[str, Any] = {}
    for dialect in opened:
        before, after = rates(f"{dialect} ours {first}"), rates(f"{dialect} ours {first} again")
        baseline = [(b + a) / 2 if b and a else None for b, a in zip(before, after, strict=False)]
        for n in all_sizes[1:]:
            rs = [ratio(x, y) for x, y in zip(rates(f"{dialect} ours {n}"), baseline, strict=False)]
            curves[f"{dialect} {n} / {first}"] = {"median": median([r for r in rs if r]), "rounds": rs}
    if "postgres" in opened and "mariadb" in opened:
        for n in all_sizes[1:]:
            pg = curves[f"postgres {n} / {first}"]["rounds"]
            maria = curves[f"mariadb {n} / {first}"]["rounds"]
            rs = [ratio(m, p) for m, p in zip(maria, pg, strict=False)]
            curves[f"mariadb curve / postgres curve at {n}"] = {
                "median": median([r for r in rs if r]),
                "rounds": rs,
            }
    versus: dict[str, Any] = {}
    if with_peer:
        for n in peer_sizes(all_sizes):
            rs = per_round(f"postgres ours {n}", f"postgres pgqueuer {n}")
            versus[f"{n}"] = {"median": median([r for r in rs if r]), "rounds": rs}
        rs = per_round(f"postgres ours {first} from spawn", f"postgres pgqueuer {first} from spawn")
        versus[f"{first} from spawn"] = {"median": median([r for r in rs if r]), "rounds": rs}
    results = {
        "procs": PROCS,
        "sizes": all_sizes,
        "repeats": repeats,
        "figures": figures,
        "curves": curves,
        "ours_over_pgqueuer": versus,
    }
    write_result(settings, "backlog", results)
    return results


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    size.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("rounds", nargs="?", type=int, default=1, help="rounds (default 1)")
    options = parser.parse_args()
    summary = run(Settings(smoke=options.smoke, quick=options.quick, repeats=options.rounds))
    for name, value in {**summary["curves"], **summary["ours_over_pgqueuer"]}.items():
        print(f"{name}: {value['median']} (rounds {value['rounds']})")
