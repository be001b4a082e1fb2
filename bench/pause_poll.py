"""What pauses cost the poll: nothing paused, 1,000 executions paused, a task name paused.

The default scheduler's claim over a big ``scheduled_tasks`` with nothing paused (the
baseline), with 1,000 executions paused and with one task name paused, the three conditions
taking turns round by round, on PostgreSQL and MariaDB.

What a pause changes in the poll. A paused *execution* is moved to ``scheduled_tasks_held``:
the poll meets one row fewer and its statements do not change. A paused *task name* is a row
in ``scheduled_tasks_pauses``, which the poller reads at most once per 0.9 polling interval;
its claim then names one known task fewer in its ``IN (…)`` (lock-and-fetch) and the fetch read
gains a ``NOT IN (…)``. With nothing paused the statements are those of an engine without
pauses. The paused name's due rows stay in the table while it is paused, and only grow older:
here they are the *oldest* due rows, so every claim made during the pause passes over all of
them to reach the rows it may take.

The table: ``--rows`` rows of three task names (``bench``, ``other``, ``quiet``): ``--due`` due
now (``other``'s half due before ``bench``'s half), the rest due over the next 30 days, loaded
server-side and analysed. The pauses go through the client API (``SchedulerClient`` on an
engine of its own, as an operator's ``ekbatan tasks pause`` would): ``pause_execution`` of
``--paused`` future ``bench`` executions one by one, or ``pause_task("other")``; the scheduler's
poller reads them as before a poll (``scheduler.pauses.refresh``).

What is timed, through the repository of a scheduler built with the defaults (never started):
the claims ``repository.lock_and_fetch(now, n)`` that ``auto`` (both servers have ``SKIP
LOCKED``) makes — n = 10, the first claim and every claim of long tasks, and n = 100, the most
it claims once it has timed short executions — each sample's claim given back by key off the
clock; the fetch read (``get_due(now, 30)``, what ``auto`` falls back to without ``SKIP
LOCKED``); and the pauses read itself (``paused_task_names``, once per polling interval). In a
round each condition is set up, checked (the paused rows are held and gone from the table; no
claim holds a row of the paused name, while the baseline's do; every claim is full), then each
statement is sampled ``--samples`` times, the statements interleaved sample by sample; a
condition's figure is the median sample. The order of the conditions rotates round by round so
that a drifting load falls on all three; a ratio is taken against the baseline of the same
round, and the report gives the median over the rounds (and their range).

``./run bench pause_poll [--db postgres,mariadb] [--rows N] [--rounds N] [--samples N] [--smoke]``
(or ``python -m bench.pause_poll``; default 1,000,000 rows, 1,000 due, 1,000 paused executions,
5 rounds of 50 samples). It prints its figures; nothing is written to ``bench/out``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    analyze,
    create_scheduler_table,
    load_rows,
    pooled_engine,
    raw_connect,
    scratch_database,
)
from bench.environment import engine_has_uncommitted_changes, git_head, loadavg, snapshot_engine

#: the task whose rows the claims take, the one paused in the third condition, and one with
#: future rows only (a known name in the claim's ``IN`` list all the same)
CLAIMED, PAUSED, QUIET = "bench", "other", "quiet"
NAMES = (CLAIMED, PAUSED, QUIET)

BASELINE, EXECUTIONS, TASK = "baseline", "executions", "task"
CONDITIONS = (BASELINE, EXECUTIONS, TASK)

#: the requirement: "poll cost … stays within 1.2 × of today's poll" (a ratio above it is flagged)
GOAL = 1.2


@dataclass(frozen=True)
class Sizes:
    rows: int = 1_000_000
    due: int = 1_000
    paused: int = 1_000
    rounds: int = 5
    samples: int = 50


#: a few seconds per database: checks the harness and that every pause takes, measures nothing
SMOKE = Sizes(rows=3_000, due=300, paused=20, rounds=1, samples=3)


def condition_label(condition: str, sizes: Sizes) -> str:
    return {
        BASELINE: "nothing paused",
        EXECUTIONS: f"{sizes.paused:,} executions paused",
        TASK: f"task {PAUSED!r} paused",
    }[condition]


@dataclass(frozen=True)
class Statement:
    """One poll statement as the poller calls it; ``claims``: its rows are given back after
    each sample."""

    key: str
    label: str
    call: Callable[[datetime], Sequence[Any]]
    claims: bool
    #: rows a sample must return (None: not checked)
    expect: int | None


@dataclass
class DialectResult:
    dialect: str
    sizes: Sizes
    load_s: float
    strategy: str
    statements: list[tuple[str, str]]
    #: condition → statement → the condition's median milliseconds, one per round
    ms: dict[str, dict[str, list[float]]]
    #: milliseconds per ``pause_execution`` / ``resume_execution`` call, one per round
    pause_ms: list[float] = field(default_factory=list)
    resume_ms: list[float] = field(default_factory=list)
    #: rows of the paused name the baseline's claims took (they are the oldest due rows)
    baseline_claimed_paused_name: int = 0

    def ratios(self, condition: str, statement: str) -> list[float]:
        base = self.ms[BASELINE][statement]
        return [m / b for m, b in zip(self.ms[condition][statement], base, strict=True)]


# ----------------------------------------------------------------------------- the table
def _fill(url: str, sizes: Sizes) -> float:
    """Load the table server-side (the scale benchmark's bulk insert) and analyse it."""
    future = sizes.rows - sizes.due
    per_name = [future // 3 + (1 if i < future % 3 else 0) for i in range(3)]
    took = 0.0
    for name, count in zip(NAMES, per_name, strict=True):
        took += load_rows(url, count, due_in=timedelta(days=1), spread=timedelta(days=30), task_name=name)
    # The paused name's due rows first: while a name is paused its due rows only age, so in a
    # poll's execution_time order they come before everything else that is due.
    half = sizes.due // 2
    took += load_rows(
        url, half, due_in=timedelta(minutes=-3), spread=timedelta(seconds=60), prefix="d", task_name=PAUSED
    )
    took += load_rows(
        url,
        sizes.due - half,
        due_in=timedelta(minutes=-1),
        spread=timedelta(seconds=30),
        prefix="d",
        task_name=CLAIMED,
    )
    began = time.perf_counter()
    analyze(url)
    return took + time.perf_counter() - began


class _Giveback:
    """Gives a sample's claims back by key, off the clock, on a connection of its own: the due
    rows are due and unpicked again for the next sample (version aside, which no claim reads)."""

    def __init__(self, url: str) -> None:
        self.conn = raw_connect(url, autocommit=True)

    def __call__(self, executions: Sequence[Any]) -> None:
        if not executions:
            return
        keys = ", ".join(["(%s, %s)"] * len(executions))
        params: list[Any] = [False]
        for e in executions:
            params += [e.task_name, e.instance_id]
        cur = self.conn.cursor()
        cur.execute(
            "UPDATE scheduled_tasks SET picked = %s, picked_by = NULL, last_heartbeat = NULL "
            f"WHERE (task_name, task_instance) IN ({keys})",
            params,
        )
        if cur.rowcount != len(executions):
            raise RuntimeError(f"gave back {cur.rowcount} of {len(executions)} claimed rows")

    def settle(self, dialect: str) -> None:
        """Before each condition: on PostgreSQL, vacuum away the dead row versions the previous
        condition's claims and give-backs left (``last_heartbeat`` is indexed, so those updates
        are not HOT and leave entries in the execution_time index the claim walks), so that no
        condition inherits more of them than another. InnoDB purges on its own."""
        if dialect == "postgres":
            self.conn.cursor().execute("VACUUM scheduled_tasks")

    def count(self, sql: str) -> int:
        cur = self.conn.cursor()
        cur.execute(sql)
        return int(cur.fetchone()[0])

    def close(self) -> None:
        self.conn.close()


# ----------------------------------------------------------------------------- measuring
def measure(dialect: str, sizes: Sizes) -> DialectResult:
    """Fill a scratch database, then time the poll statements under each condition, round by
    round. Raises when a condition is not what it claims to be (a pause that did not take)."""
    from ekbatan.distributed_jobs.scheduler import HoldState, Scheduler, SchedulerClient, Tasks
    from ekbatan.distributed_jobs.scheduler._polling.strategy_config import (
        MAX_CLAIMED_PER_THREAD,
        PollingStrategyConfig,
    )

    with scratch_database(dialect) as db:
        create_scheduler_table(db.url)
        load_s = _fill(db.url, sizes)
        print(f"{dialect}: {sizes.rows:,} rows loaded and analysed in {load_s:.1f} s", flush=True)

        engine = pooled_engine(db.url, 2)
        # 2, not 1: on a fresh repository get_execution holds a connection while it looks up
        # the table's columns on another (a one-connection pool waits 30 s and fails)
        client_engine = pooled_engine(db.url, 2)
        tasks = [Tasks.one_time(name).execute(lambda i, c: None) for name in NAMES]
        # the defaults (auto, threads 10), never started: its repository makes the poller's
        # statements, its pause watch reads the pauses as a poll does
        scheduler = Scheduler.create(engine, *tasks).scheduler_name("bench-pause-poll").build()
        client = SchedulerClient(client_engine)  # an operator's: knows no tasks
        repo = scheduler.repository
        giveback = _Giveback(db.url)
        if not repo.server_has_skip_locked():
            raise RuntimeError(f"{repo.server_description()} has no SKIP LOCKED: auto would fetch")
        strategy = f"auto → lock-and-fetch ({repo.server_description()})"

        first = scheduler.upper_limit  # auto's claim before it has timed an execution
        sized = scheduler.threads * MAX_CLAIMED_PER_THREAD  # its most, for short executions
        fetch = PollingStrategyConfig.fetch().limits(scheduler.threads)[1]  # auto's fallback read
        if sizes.due // 2 < max(sized, fetch):
            raise ValueError(f"--due must be at least {2 * max(sized, fetch)} so that every claim is full")
        statements = [
            Statement(
                "claim_first", f"claim {first}", lambda now: repo.lock_and_fetch(now, first), True, first
            ),
            Statement(
                "claim_sized", f"claim {sized}", lambda now: repo.lock_and_fetch(now, sized), True, sized
            ),
            Statement("fetch", f"fetch read {fetch}", lambda now: repo.get_due(now, fetch), False, fetch),
            Statement("pauses_read", "pauses read", lambda now: tuple(repo.paused_task_names()), False, None),
        ]
        paused_keys = [(CLAIMED, f"r{i}") for i in range(1, sizes.paused + 1)]
        result = DialectResult(
            dialect,
            sizes,
            load_s,
            strategy,
            [(s.key, s.label) for s in statements],
            {c: {s.key: [] for s in statements} for c in CONDITIONS},
        )

        def enter(condition: str) -> None:
            if condition == EXECUTIONS:
                began = time.perf_counter()
                for key in paused_keys:
                    if not client.pause_execution(key, reason="bench", by="bench"):
                        raise RuntimeError(f"{key} was paused already")
                result.pause_ms.append((time.perf_counter() - began) * 1000 / len(paused_keys))
            elif condition == TASK and not client.pause_task(PAUSED, reason="bench", by="bench"):
                raise RuntimeError(f"{PAUSED} was paused already")
            scheduler.pauses.refresh(now=True)  # what the next poll does within 0.9 interval

        def check_entered(condition: str) -> None:
            held = client.count_held()
            want_held = {(CLAIMED, HoldState.PAUSED): sizes.paused} if condition == EXECUTIONS else {}
            if held != want_held:
                raise RuntimeError(f"{condition}: held {held}, expected {want_held}")
            left = giveback.count("SELECT count(*) FROM scheduled_tasks")
            want_left = sizes.rows - (sizes.paused if condition == EXECUTIONS else 0)
            if left != want_left:
                raise RuntimeError(f"{condition}: {left:,} rows in scheduled_tasks, expected {want_left:,}")
            paused = scheduler.repository.resolver.paused_names()
            if paused != (frozenset({PAUSED}) if condition == TASK else frozenset()):
                raise RuntimeError(f"{condition}: the poller sees {set(paused) or 'nothing'} paused")

        def leave(condition: str) -> None:
            if condition == EXECUTIONS:
                began = time.perf_counter()
                for key in paused_keys:
                    if len(client.resume_execution(key).executions) != 1:
                        raise RuntimeError(f"{key} did not come back")
                result.resume_ms.append((time.perf_counter() - began) * 1000 / len(paused_keys))
            elif condition == TASK:
                client.resume_task(PAUSED)
            scheduler.pauses.refresh(now=True)

        def sample(condition: str) -> dict[str, float]:
            times: dict[str, list[float]] = {s.key: [] for s in statements}
            for i in range(sizes.samples + 1):  # the first warms plans and pooled connections
                for s in statements:
                    now = datetime.now(UTC)
                    began = time.perf_counter()
                    rows = s.call(now)
                    elapsed = (time.perf_counter() - began) * 1000
                    if s.claims:
                        giveback(rows)
                    if s.expect is not None and len(rows) != s.expect:
                        raise RuntimeError(f"{condition}: {s.label} returned {len(rows)} rows")
                    names = {getattr(r, "task_name", None) for r in rows}
                    if condition == TASK and PAUSED in names:
                        raise RuntimeError(f"{s.label} returned a row of the paused task {PAUSED!r}")
                    if condition == BASELINE and s.claims:
                        result.baseline_claimed_paused_name += sum(r.task_name == PAUSED for r in rows)
                    if i:
                        times[s.key].append(elapsed)
            return {k: statistics.median(v) for k, v in times.items()}

        try:
            for r in range(sizes.rounds):
                order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
                for condition in order:
                    enter(condition)
                    try:
                        check_entered(condition)
                        giveback.settle(dialect)
                        for key, ms in sample(condition).items():
                            result.ms[condition][key].append(ms)
                    finally:
                        leave(condition)
                    check_entered(BASELINE)  # everything back where it was
                print(
                    f"{dialect} round {r + 1}/{sizes.rounds} ({' → '.join(order)}): "
                    + "; ".join(
                        f"{c} " + ", ".join(f"{result.ms[c][k][-1]:.2f}" for k, _ in result.statements)
                        for c in CONDITIONS
                    )
                    + " ms",
                    flush=True,
                )
            if not result.baseline_claimed_paused_name:
                raise RuntimeError(f"no baseline claim took a row of {PAUSED!r}: the pause was not tested")
        finally:
            giveback.close()
            scheduler.stop()
            engine.dispose()
            client_engine.dispose()
    return result


# ----------------------------------------------------------------------------- reporting
def _cell(values: Sequence[float], ratio: bool) -> str:
    mid = statistics.median(values)
    if not ratio:
        return f"{mid:.2f} ms"
    flag = " !" if mid > GOAL else ""
    if len(values) == 1:
        return f"{mid:.2f}×{flag}"
    return f"{mid:.2f}× ({min(values):.2f}–{max(values):.2f}){flag}"


def table(results: Sequence[DialectResult]) -> str:
    """One block per database: the baseline's median milliseconds, then each condition's
    median ratio to the baseline of the same round (and the range over the rounds)."""
    lines = []
    for res in results:
        s = res.sizes
        lines.append(
            f"{res.dialect}: {s.rows:,} rows ({s.due:,} due), {res.strategy}, "
            f"{s.rounds} round(s) × {s.samples} samples"
        )
        width = max(len(condition_label(c, s)) for c in CONDITIONS) + 2
        cols = [label for _, label in res.statements]
        cells = [
            [_cell(res.ms[BASELINE][k], False) for k, _ in res.statements],
            *[[_cell(res.ratios(c, k), True) for k, _ in res.statements] for c in CONDITIONS[1:]],
        ]
        widths = [max(len(col), *(len(row[i]) for row in cells)) + 2 for i, col in enumerate(cols)]
        header = "".join(col.ljust(w) for col, w in zip(cols, widths, strict=True))
        lines.append(("  " + " " * width + header).rstrip())
        for condition, row in zip(CONDITIONS, cells, strict=True):
            lines.append(
                "  "
                + condition_label(condition, s).ljust(width)
                + "".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
        claims = [k for k, _ in res.statements if k.startswith("claim")]
        worst = max(statistics.median(res.ratios(c, k)) for c in CONDITIONS[1:] for k in claims)
        lines.append(
            f"  worst median ratio of the claims {worst:.2f} (goal ≤ {GOAL}); "
            f"pause_execution {statistics.median(res.pause_ms):.2f} ms, "
            f"resume_execution {statistics.median(res.resume_ms):.2f} ms per call"
        )
        lines.append(
            f"  checked: {s.paused:,} executions held and out of scheduled_tasks while paused; "
            f"no row of {PAUSED!r} returned while it was paused (the baseline's claims took "
            f"{res.baseline_claimed_paused_name:,}); every claim full; nothing held or paused after"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line
def _engine_source(live: bool) -> str:
    """Where the engine is imported from. By default a copy of its source taken now, as
    ``./run bench`` takes one: the work tree is edited while benchmarks run."""
    dirty = engine_has_uncommitted_changes()
    state = f"git {git_head()}{' + uncommitted engine changes' if dirty else ''}"
    if live or "ekbatan.distributed_jobs" in sys.modules:  # imported already: a copy cannot take
        return f"live work tree ({state})"
    out = Path(tempfile.mkdtemp(prefix="bench-pause-poll-"))
    atexit.register(shutil.rmtree, out, True)
    return f"snapshot {snapshot_engine(out)['sha256']} ({state})"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./run bench pause_poll", description=__doc__.splitlines()[0])
    p.add_argument("--db", default="postgres,mariadb", help="comma-separated: postgres,mariadb")
    p.add_argument("--rows", type=int, help=f"rows in scheduled_tasks (default {Sizes.rows:,})")
    p.add_argument("--due", type=int, help=f"of them due now (default {Sizes.due:,})")
    p.add_argument("--paused", type=int, help=f"executions paused (default {Sizes.paused:,})")
    p.add_argument("--rounds", type=int, help=f"default {Sizes.rounds}")
    p.add_argument(
        "--samples", type=int, help=f"per statement, condition and round (default {Sizes.samples})"
    )
    p.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): checks the harness only")
    p.add_argument("--live-engine", action="store_true", help="import the engine from the work tree")
    args = p.parse_args(argv)
    dbs = [d.strip() for d in args.db.split(",") if d.strip()]
    if not dbs or any(d not in ("postgres", "mariadb") for d in dbs):
        p.error(f"--db: postgres and/or mariadb (lock-and-fetch needs SKIP LOCKED), got {args.db!r}")
    given = {k: getattr(args, k) for k in ("rows", "due", "paused", "rounds", "samples")}
    sizes = replace(SMOKE if args.smoke else Sizes(), **{k: v for k, v in given.items() if v is not None})
    if min(sizes.due, sizes.paused, sizes.rounds, sizes.samples) < 1:
        p.error("--due, --paused, --rounds and --samples must be at least 1")
    if (sizes.rows - sizes.due) // 3 < sizes.paused:
        p.error(f"--rows: the future rows of {CLAIMED!r} (a third) must number at least --paused")

    engine_source = _engine_source(args.live_engine)
    started = datetime.now(UTC)
    print(
        f"pause_poll {' '.join(argv if argv is not None else sys.argv[1:])}: "
        f"{started:%Y-%m-%d %H:%M:%S} UTC, load average {loadavg()}, engine {engine_source}",
        flush=True,
    )
    results = [measure(d, sizes) for d in dbs]
    print(table(results), flush=True)
    print(
        f"pause_poll took {(datetime.now(UTC) - started).total_seconds():.0f} s; "
        f"load average at the end {loadavg()} ({os.cpu_count()} CPUs)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
