"""Start-up: the 20,000-row drain against pgqueuer's, timed from the release and from the spawn.

``./run bench start_up [--rounds N] [--executions N]`` (PostgreSQL; also
``python -m bench.start_up``). Each round drains the same burst four ways, taking turns, with the
defaults of both systems and 4 processes each (the backlog benchmark's drains):

* **from the release**: t0 = the moment the ready processes are told to go. Each then starts its
  scheduler, so this includes the scheduler's own start-up: the first poll's strategy choice and
  claim sizing's warm-up, with the pool's connections already open;
* **from the spawn**: t0 = the moment the processes are started, so the interpreter, the imports
  (SQLAlchemy and psycopg for us; asyncpg and pgqueuer for the peer), the build and the first
  connections count too. Our packages' bytecode is written first, as an installed package has it.

It prints each drain, ours ÷ pgqueuer per round for both timings and the medians; it writes
nothing to ``bench/out`` (the backlog benchmark's full pass reports both timings too).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench import peers
from bench.backlog import ours, pgqueuer
from bench.common import Settings, create_scheduler_table, median, ratio, scratch_database
from bench.environment import loadavg

TIMINGS = ("release", "spawn")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./run bench start_up", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--executions", type=int, default=20_000)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.executions < 1:
        p.error("--rounds and --executions must be at least 1")
    settings = Settings(dbs=("postgres",))
    if not peers.ensure_venv(settings):
        print("start_up: the peers' venv (bench/.venv-peers) could not be made", file=sys.stderr)
        return 1
    print(f"start_up: {args.executions:,} rows, {args.rounds} round(s), load average {loadavg()}", flush=True)
    ratios: dict[str, list[float | None]] = {t: [] for t in TIMINGS}
    with scratch_database("postgres") as db:
        create_scheduler_table(db.url)
        for round_ in range(1, args.rounds + 1):
            for timing in TIMINGS:
                spawn = timing == "spawn"
                mine = ours(db.url, args.executions, from_spawn=spawn)
                theirs = pgqueuer(settings, args.executions, from_spawn=spawn)
                r = ratio(mine.get("exec_per_s"), theirs.get("exec_per_s"))
                r = None if r is None else round(r, 2)
                ratios[timing].append(r)
                print(
                    f"round {round_} from the {timing}: ours {mine.get('exec_per_s')}/s ({mine.get('seconds')} s), "
                    f"pgqueuer {theirs.get('exec_per_s')}/s ({theirs.get('seconds')} s), ratio {r}",
                    flush=True,
                )
    for timing in TIMINGS:
        middle = median([r for r in ratios[timing] if r])
        print(f"ours ÷ pgqueuer from the {timing}: median {middle}, rounds {ratios[timing]}")
    print(f"load average at the end {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
