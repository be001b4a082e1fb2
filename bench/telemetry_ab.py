"""What telemetry costs, interleaved: the engine's defaults with telemetry off, against the same
with ``telemetry()`` on and no SDK installed (OpenTelemetry's global no-op providers: what a
library user who added the extra but configured nothing gets; goal ≥ 0.99), served to
Prometheus by ``prometheus_client`` from the process's own counters (``prometheus_registry``,
no SDK), with the SDK recording every metric for a Prometheus reader (goal ≥ 0.9), each
scraped every 5 s, and with that and every run's span besides ("full": no goal, a span per run is the price of
tracing every run; sample to lower it).

Each round drains ``EXECUTIONS`` trivial due executions in each configuration (the order
rotates round by round so that a drifting load falls on all alike), with 1 and 4 processes; the
ratio to "off" is taken per round, then the median.

``python -m bench.telemetry_ab [--rounds N] [--db postgres,mariadb] [--executions N]``
(default 3 rounds, 20,000 executions). Nothing is written to ``bench/out``: it prints its
figures, as ``history_ab`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from bench import throughput
from bench.common import create_scheduler_table, scratch_database

DEFAULTS: dict[str, Any] = {"strategy": "default", "threads": 10, "strict": False}
#: off, the API without an SDK, Prometheus without an SDK, the SDK's metrics with a Prometheus
#: reader, those and spans
CONFIGS = (None, "api", "prometheus", "metrics", "full")
MEASURED = CONFIGS[1:]


def drain(url: str, executions: int, procs: int, telemetry: str | None) -> float:
    result = throughput.run_once(url, executions, {**DEFAULTS, "procs": procs, "telemetry": telemetry})
    if result["left"] or result["errors"]:
        raise RuntimeError(f"a drain left {result['left']} executions or failed: {result}")
    return float(result["exec_per_s"])


def compare(
    dialect: str, executions: int, rounds: int, procs_each: tuple[int, ...] = (1, 4)
) -> dict[tuple[int, str], list[float]]:
    ratios: dict[tuple[int, str], list[float]] = {(p, c): [] for p in procs_each for c in MEASURED}
    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        for r in range(rounds):
            for procs in procs_each:
                turn = r % len(CONFIGS)
                order = CONFIGS[turn:] + CONFIGS[:turn]
                rate = {config: drain(db.url, executions, procs, config) for config in order}
                for config in MEASURED:
                    ratios[(procs, config)].append(rate[config] / rate[None])
                figures = ", ".join(f"{c} {rate[c]:.0f}/s ({rate[c] / rate[None]:.3f})" for c in MEASURED)
                print(f"{dialect} round {r + 1} {procs} proc: off {rate[None]:.0f}/s, {figures}", flush=True)
        for (procs, config), values in ratios.items():
            print(
                f"{dialect} {procs} proc {config}/off per round {[round(x, 3) for x in values]}, "
                f"median {statistics.median(values):.3f}",
                flush=True,
            )
    return ratios


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.telemetry_ab", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--db", default="postgres,mariadb")
    p.add_argument("--executions", type=int, default=20_000)
    args = p.parse_args(argv)
    print(f"load average at start {os.getloadavg()}", flush=True)
    for dialect in args.db.split(","):
        compare(dialect, args.executions, args.rounds)
    print(f"load average at end {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
