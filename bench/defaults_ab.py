"""Out of the box, interleaved: the engine's defaults (``Scheduler.create(engine, task).build()``,
threads 10) against pgqueuer's defaults on PostgreSQL, and against the batch-pick +
batched-delete ceiling on MariaDB; 1 and 4 processes, the two sides taking turns round by round
so that the load of a shared host drifts over both alike. Ratios are per round, then the median.

``python -m bench.defaults_ab [rounds]`` (default 3; creates ``bench/.venv-peers`` from PyPI on first use, see README).
Nothing is written to ``bench/out``: it prints its figures.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable

from bench import limits, peers, throughput
from bench.common import Settings, create_scheduler_table, scratch_database

EXECUTIONS = 20_000
DEFAULTS = {"strategy": "default", "threads": 10, "strict": False}


def _pgqueuer(url: str, procs: int) -> float | None:
    out = peers.run_command(peers.throughput_command(Settings(), "pgqueuer", procs, EXECUTIONS), timeout=300)
    return out.get("exec_per_s")


def _ceiling(url: str, procs: int) -> float | None:
    return limits.run_once(url, "pick_batch_delete", procs, 5.0, 300_000)["exec_per_s"]


def compare(dialect: str, baseline: str, measure: Callable[[str, int], float | None], rounds: int) -> None:
    figures: dict[tuple[str, int], list[float]] = {}
    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        for r in range(rounds):
            for procs in (1, 4):
                ours = throughput.run_once(db.url, EXECUTIONS, {**DEFAULTS, "procs": procs})["exec_per_s"]
                theirs = measure(db.url, procs)
                figures.setdefault(("defaults", procs), []).append(ours)
                figures.setdefault((baseline, procs), []).append(theirs or 0.0)
                print(
                    f"{dialect} round {r + 1} {procs} proc: defaults {ours}/s, {baseline} {theirs}/s",
                    flush=True,
                )
    for procs in (1, 4):
        ours, theirs = figures[("defaults", procs)], figures[(baseline, procs)]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b]
        print(
            f"{dialect} {procs} proc: defaults median {statistics.median(ours):.0f}/s, {baseline} median "
            f"{statistics.median(theirs):.0f}/s; ratio per round {[round(x, 2) for x in ratios]}, "
            f"median {statistics.median(ratios):.2f}",
            flush=True,
        )


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not peers.ensure_venv(Settings()):
        sys.exit(f"pgqueuer is needed and {peers.PEERS_VENV} could not be made ready")
    print(f"load average at start {os.getloadavg()}", flush=True)
    compare("postgres", "pgqueuer", _pgqueuer, rounds)
    compare("mariadb", "ceiling", _ceiling, rounds)
    print(f"load average at end {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
