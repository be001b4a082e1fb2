"""``./run bench [BENCHMARK ...] [--quick | --smoke] [--db postgres,mariadb,sqlite] [--repeats N]``

Runs the chosen benchmarks (default: all, in the order below), each writing
``bench/out/<name>.json``, then writes ``bench/RESULTS.md`` from every JSON file in the
output folder (``--out DIR`` writes both elsewhere). ``./run bench NAME [OPTIONS]`` with a
:data:`STANDALONE` name runs that benchmark alone with its own options. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

from bench.common import DEFAULT_OUT, Settings, log, write_result
from bench.environment import environment, git_head, loadavg, snapshot_engine

BENCHMARKS = (
    "limits",
    "throughput",
    "backlog",
    "inflow",
    "peers",
    "latency",
    "scale",
    "footprint",
    "bulk",
    "profile",
    "pipeline",
    "outbox_peer",
)

#: benchmarks with options of their own, run one at a time: ``./run bench NAME [OPTIONS]``
#: hands the rest of the command line to ``bench.NAME.main``. They print their figures and
#: write nothing to ``bench/out``, so they are not part of the full pass nor of RESULTS.md.
STANDALONE = ("pause_poll", "operator_pages", "start_up")


def parse(argv: list[str]) -> tuple[list[str], Settings, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="./run bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "benchmarks",
        nargs="*",
        metavar="BENCHMARK",
        help=f"any of {', '.join(BENCHMARKS)} (default: all); alone with its own options: "
        f"{', '.join(STANDALONE)} (NAME --help)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sizes, 1 repeat (a few minutes)")
    size.add_argument(
        "--smoke", action="store_true", help="tiny sizes, 1 repeat (seconds; what the tests run)"
    )
    p.add_argument("--db", default="postgres,mariadb,sqlite", help="comma-separated: postgres,mariadb,sqlite")
    p.add_argument("--repeats", type=int, default=3, help="runs per figure; the median is reported")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="folder for the JSON results (and RESULTS.md)"
    )
    p.add_argument("--results", type=Path, default=None, help="where to write RESULTS.md")
    p.add_argument("--no-report", action="store_true", help="do not (re)write RESULTS.md")
    p.add_argument("--no-peer-install", action="store_true", help="never create bench/.venv-peers")
    p.add_argument("--report-only", action="store_true", help="only rewrite RESULTS.md from the JSON files")
    p.add_argument(
        "--live-engine",
        action="store_true",
        help="import the engine from the work tree in every worker (default: a snapshot taken at the start)",
    )
    p.add_argument(
        "--procrastinate-jobs",
        type=int,
        default=None,
        help="jobs per procrastinate run (default: as the others)",
    )
    args = p.parse_args(argv)
    bad = [b for b in args.benchmarks if b not in BENCHMARKS]
    if bad:
        p.error(f"unknown benchmark(s) {bad}; choose from {', '.join(BENCHMARKS)}")
    dbs = tuple(d.strip() for d in args.db.split(",") if d.strip())
    unknown = [d for d in dbs if d not in ("postgres", "mariadb", "sqlite")]
    if unknown:
        p.error(f"--db: unknown {unknown}")
    settings = Settings(
        smoke=args.smoke,
        quick=args.quick,
        dbs=dbs,
        repeats=1 if (args.smoke or args.quick) else max(1, args.repeats),
        out=args.out,
        command="./run bench " + " ".join(shlex.quote(a) for a in argv),
        allow_peer_install=not args.no_peer_install,
        procrastinate_jobs=args.procrastinate_jobs,
    )
    return list(args.benchmarks) or list(BENCHMARKS), settings, args


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # SystemExit unwinds the benchmarks: scratch databases are dropped, and multiprocessing
    # terminates the (daemonic) worker processes at exit.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in STANDALONE:
        return int(importlib.import_module(f"bench.{argv[0]}").main(argv[1:]))
    chosen, settings, args = parse(argv)
    failed: list[str] = []
    if not args.report_only:
        started = time.time()
        snapshot = None if args.live_engine else snapshot_engine(settings.out)
        env = environment(settings.dbs)
        import ekbatan.distributed_jobs as engine_pkg

        env["engine_snapshot"] = snapshot
        env["engine_imported_from"] = str(Path(engine_pkg.__file__).parent)
        log(f"{settings.command}: {', '.join(chosen)} ({settings.mode}); load average {env['loadavg']}")
        timings = {}
        for name in chosen:
            t0 = time.time()
            try:
                importlib.import_module(f"bench.{name}").run(settings)
            except Exception as exc:  # one broken benchmark must not cost the others
                log(f"{name} FAILED: {type(exc).__name__}: {exc}")
                traceback.print_exc()
                write_result(settings, name, {"status": f"failed: {type(exc).__name__}: {exc}"})
                failed.append(name)
            timings[name] = round(time.time() - t0, 1)
            log(f"{name} done in {timings[name]} s")
        env["loadavg_end"] = loadavg()
        env["git_end"] = git_head()  # the engine is imported afresh by every worker process
        env["benchmarks"] = chosen
        env["seconds"] = timings
        env["total_s"] = round(time.time() - started, 1)
        write_result(settings, f"run-{'-'.join(chosen) if len(chosen) < len(BENCHMARKS) else 'all'}", env)
    if not args.no_report:
        from bench import report

        target = args.results or (
            Path(__file__).resolve().parent / "RESULTS.md"
            if settings.out == DEFAULT_OUT
            else settings.out / "RESULTS.md"
        )
        report.write(settings.out, target)
        log(f"wrote {target}")
    return 1 if not args.report_only and failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
