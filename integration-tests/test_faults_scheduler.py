"""Faults injected into real scheduler processes: SIGKILL, SIGSTOP, a clock that runs ahead, a
handler that never returns (the load held is in ``test_load_held.py``).

Every process is ``scheduler_fault_node.py`` (next to this file) on one shared database; what
ran is read from the ``fault_runs`` table its handlers write, and the state from
``scheduled_tasks`` itself. Heartbeats every 0.5 s, dead after 4 missed (2 s). Every child is
killed on the way out, whatever happens.
"""

from __future__ import annotations

import collections
import itertools
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    PRIORITY_MEDIUM,
    Execution,
    SchedulerClient,
    TaskInstance,
)
from testsupport import IsolatedDatabase, wait_until
from testsupport.scheduler_process import SchedulerProcess, scheduler_processes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scheduler_faults as faults
from scheduler_fault_node import HOLD_TASK, WORK_TASK, tick_name
from scheduler_faults import HB_S, MISSED_LIMIT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TICKS = 5
TICK_MS = 200


@pytest.fixture
def engine(database: IsolatedDatabase) -> Iterator[sa.Engine]:
    yield from faults.fault_engine(database)


def _hold_running(engine: sa.Engine, owner: SchedulerProcess) -> Execution:
    """Schedule ``hold``; return its row once ``owner`` runs it and has heartbeated after the claim."""
    SchedulerClient(engine).schedule(TaskInstance(HOLD_TASK, "h"))
    assert owner.expect("handler_started", 60)["version"] == 2
    claimed = faults.row(engine, HOLD_TASK, "h")
    assert claimed is not None and claimed.picked_by == owner.name
    wait_until(
        lambda: faults.row(engine, HOLD_TASK, "h").last_heartbeat > claimed.last_heartbeat,
        timeout=30,
        message="a heartbeat after the claim",
    )
    return claimed


# --------------------------------------------------------------------------- workers killed
TASKS = 5000
KILL_EVERY_S = 2.0
#: SQLite's dead window here: seven processes write one file, and a heartbeat waits for the
#: file's lock (up to the engine's 30 s busy timeout) behind the others' writes; on a loaded host
#: that wait passed 2 s, a live process's execution was revived and ran twice. The window must
#: exceed the longest write wait, as the docs say of any database.
SQLITE_MISSED_LIMIT = 16


def max_tick_gap(dead_after_s: float) -> float:
    """A recurring job's longest pause: its owner killed right after a run, so dead window + one
    detection period (2 × heartbeat) + the fixed delay + polling, and slack for a loaded machine."""
    return dead_after_s + 2 * HB_S + TICK_MS / 1000 + 2.5


@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_workers_killed_repeatedly_every_task_completes_and_recurring_jobs_keep_their_cadence(
    database, engine
):
    # Without priorities the engine runs due rows oldest first, so a backlog due before a
    # recurring job's next slot delays it until the backlog is drained; priorities put it first.
    missed_limit = SQLITE_MISSED_LIMIT if database.dialect == "sqlite" else MISSED_LIMIT
    dead_after_s, max_gap_s = HB_S * missed_limit, max_tick_gap(HB_S * missed_limit)
    node_options = {"threads": 6, "work_ms": 25, "ticks": TICKS, "tick_ms": TICK_MS, "priority": True}
    node_options["missed_limit"] = missed_limit
    killed: dict[int, str] = {}  # pid -> name
    killed_holding = 0
    with scheduler_processes() as procs:
        stable = [faults.node(database, procs, f"stable-{i}", **node_options) for i in range(1, 4)]
        for proc in stable:
            proc.start()
        began = time.monotonic()
        # an explicit priority: this client does not know the task (no default priority), and a
        # NULL priority sorts before every other on PostgreSQL, as in db-scheduler
        assert SchedulerClient(engine, priority_enabled=True).schedule_batch(
            [TaskInstance(WORK_TASK, str(i), priority=PRIORITY_MEDIUM) for i in range(TASKS)]
        )
        remaining = TASKS
        victim_no = 0
        while remaining:
            victim_no += 1
            victim = faults.node(database, procs, f"victim-{victim_no}", **node_options)
            victim.start()
            pid = victim.pid
            kill_at = time.monotonic() + KILL_EVERY_S
            while time.monotonic() < kill_at and (
                remaining := faults.scalar(
                    engine, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'work'"
                )
            ):
                time.sleep(0.05)
            holding = faults.scalar(
                engine, "SELECT COUNT(*) FROM scheduled_tasks WHERE picked_by = :n", n=victim.name
            )
            victim.signal(signal.SIGKILL)
            assert victim.wait(30) == -signal.SIGKILL
            killed[pid] = victim.name
            killed_holding += holding > 0
        drained_s = time.monotonic() - began

        # every row a killed process held is revived and finished by the others
        wait_until(
            lambda: _picked_by(engine, killed.values()) == 0,
            timeout=3 * dead_after_s + 10,
            message="no row left picked by a killed process",
        )
        settled = time.time_ns() // 1000
        # the recurring jobs keep running after the last kill too
        wait_until(
            lambda: all(
                any(r.at_us > settled for r in faults.runs(engine, tick_name(i))) for i in range(TICKS)
            ),
            timeout=max_gap_s + 5,
            message="every recurring job ran after the last kill",
        )
        reports = {proc.name: proc.stop() for proc in stable}

    print(
        f"{TASKS} tasks drained in {drained_s:.1f}s with {len(killed)} kills ({killed_holding} holding rows)"
    )
    assert len(killed) >= 2, f"only {len(killed)} kill(s): the workload ended too soon to test anything"
    assert killed_holding >= 1, "no victim held a row when killed"

    work = faults.runs(engine, WORK_TASK)
    by_instance = collections.defaultdict(list)
    for run in work:
        by_instance[run.instance].append(run.pid)
    assert set(by_instance) == {str(i) for i in range(TASKS)}, "some one-time tasks never ran"
    # at least once; more than once only where the other runs were by killed processes
    for instance, pids in by_instance.items():
        survivors = [p for p in pids if p not in killed]
        assert len(survivors) <= 1, f"task {instance} ran {len(survivors)} times on live processes: {pids}"
    duplicated = sum(len(p) > 1 for p in by_instance.values())
    print(f"{duplicated} task(s) ran twice (each time once by a killed process)")
    assert faults.scalar(engine, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'work'") == 0

    for i in range(TICKS):
        times = [r.at_us for r in faults.runs(engine, tick_name(i))]
        gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(times)]
        assert max(gaps) <= max_gap_s, f"tick-{i} paused {max(gaps):.2f}s (limit {max_gap_s}s)"

    for name, report in reports.items():
        assert report["events"].get("UNEXPECTED_ERROR", 0) == 0, (
            f"{name}: {report['events']}\n{report['stderr'][-3000:]}"
        )
        assert report["executing_after_stop"] == 0
    # Revivals are proven in the table above: no row is left picked by a killed process and every
    # task ran. The stable nodes' DEAD_EXECUTION events are no count of them: a later victim may
    # have revived a row before it was killed in turn, and its report died with it (3 counted for
    # 4 holding victims, once, on MariaDB).


def _picked_by(engine: sa.Engine, names: Iterable[str]) -> int:
    query = sa.text("SELECT COUNT(*) FROM scheduled_tasks WHERE picked_by IN :names").bindparams(
        sa.bindparam("names", expanding=True)
    )
    with engine.connect() as conn:
        return conn.execute(query, {"names": list(names)}).scalar_one()


def _just_after_heartbeat(engine: sa.Engine) -> None:
    """Return right after the next heartbeat of ``hold`` commits, so that a SIGSTOP then does not
    freeze its owner inside a write transaction (holding a row lock, or SQLite's write lock)."""
    beat = faults.row(engine, HOLD_TASK, "h").last_heartbeat
    wait_until(
        lambda: faults.row(engine, HOLD_TASK, "h").last_heartbeat > beat,
        timeout=30,
        interval=0.002,
        message="a heartbeat",
    )


def _hold_runs(engine: sa.Engine) -> list[tuple[str, int]]:
    return [(r.node, r.version) for r in faults.runs(engine, HOLD_TASK)]


def _event_count(proc: SchedulerProcess, event: str) -> int:
    return faults.status(proc).get(event, 0)


# --------------------------------------------------------------------------- stalled process
@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_stalled_process_cannot_record_a_result_or_overwrite_the_new_owner(database, engine):
    with scheduler_processes() as procs:
        stalled = faults.node(database, procs, "stalled", hold=True)
        stalled.start()
        _hold_running(engine, stalled)
        rescuer = faults.node(database, procs, "rescuer", hold=True)
        rescuer.start()
        _just_after_heartbeat(engine)
        stalled.signal(signal.SIGSTOP)
        # version: 1 insert, 2 stalled's claim, 3 revival, 4 rescuer's claim
        assert rescuer.expect("handler_started", 30)["version"] == 4
        stalled.signal(signal.SIGCONT)
        stalled.send("release")
        stalled.expect("handler_returned", 30)
        wait_until(
            lambda: _event_count(stalled, "COMPLETIONHANDLER_ERROR") == 1,
            timeout=30,
            interval=0.1,
            message="the stalled process's completion refused",
        )
        # its heartbeats, if any got through, changed nothing either: the rescuer still owns it
        owned = faults.row(engine, HOLD_TASK, "h")
        assert (owned.picked, owned.picked_by, owned.version) == (True, "rescuer", 4)
        rescuer.send("release")
        wait_until(
            lambda: faults.row(engine, HOLD_TASK, "h") is None, timeout=30, message="the rescuer's completion"
        )
        stalled_report = stalled.stop()
        rescuer_report = rescuer.stop()

    assert _hold_runs(engine) == [("stalled", 2), ("rescuer", 4)]
    assert rescuer_report["events"].get("DEAD_EXECUTION") == 1
    assert rescuer_report["events"].get("UNEXPECTED_ERROR", 0) == 0, rescuer_report["stderr"][-3000:]
    # the lost race is a warning in the log, and the process carries on
    assert "result of hold/h@v2 not recorded: the row changed meanwhile" in stalled_report["stderr"], (
        stalled_report["stderr"][-3000:]
    )
    assert stalled_report["events"].get("COMPLETIONHANDLER_ERROR") == 1
    assert stalled_report["executing_after_stop"] == 0


# --------------------------------------------------------------------------- clock skew
#: here dead after 4 s without a heartbeat (0.5 s × 8), heartbeats every 0.5 s: a process ahead
#: by 1 s sees a healthy owner as dead only if its heartbeats run 3 s late, which a busy CI host
#: does not do; ahead by 5 s, every heartbeat looks dead
SKEW_MISSED_LIMIT = 8
WITHIN_TOLERANCE_MS = 1000
BEYOND_DEAD_WINDOW_MS = 5000


@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_clock_ahead_takes_a_healthy_execution_only_beyond_the_documented_tolerance(database, engine):
    with scheduler_processes() as procs:
        owner = faults.node(database, procs, "owner", hold=True, missed_limit=SKEW_MISSED_LIMIT)
        owner.start()
        _hold_running(engine, owner)
        ahead = faults.node(
            database, procs, "ahead", clock_offset_ms=WITHIN_TOLERANCE_MS, missed_limit=SKEW_MISSED_LIMIT
        )
        ahead.start()
        # each detection round (every 2 × heartbeat) is a chance to take it; give it five
        wait_until(
            lambda: _event_count(ahead, "RAN_DETECT_DEAD") >= 5,
            timeout=30,
            interval=0.2,
            message="five dead-execution rounds on the process ahead",
        )
        kept = faults.row(engine, HOLD_TASK, "h")
        assert (kept.picked, kept.picked_by, kept.version) == (True, "owner", 2)
        assert _event_count(ahead, "DEAD_EXECUTION") == 0

        # the documented limit: ahead by more than the dead window, every heartbeat looks dead
        far = faults.node(
            database,
            procs,
            "far-ahead",
            clock_offset_ms=BEYOND_DEAD_WINDOW_MS,
            missed_limit=SKEW_MISSED_LIMIT,
        )
        far.start()
        wait_until(
            lambda: _event_count(far, "DEAD_EXECUTION") == 1,
            timeout=30,
            interval=0.1,
            message="the process far ahead revives the healthy execution",
        )
        # the event is counted before the revival's write commits; released before that write,
        # the owner's completion would still find version 2 and delete the row unrevived
        wait_until(
            lambda: len(_hold_runs(engine)) == 2,
            timeout=30,
            interval=0.05,
            message="the revived execution claimed and run again",
        )
        assert _event_count(ahead, "DEAD_EXECUTION") == 0
        owner.send("release")
        wait_until(
            lambda: faults.row(engine, HOLD_TASK, "h") is None,
            timeout=30,
            message="the revived run completes",
        )
        for proc in (owner, ahead, far):
            proc.stop()

    runs = _hold_runs(engine)
    assert runs[0] == ("owner", 2) and runs[1][1] == 4 and runs[1][0] in ("ahead", "far-ahead"), runs


# --------------------------------------------------------------------------- hung work
SHUTDOWN_WAIT_S = 1.0


@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_hung_job_stalls_nothing_else_and_stop_abandons_it_to_be_revived_elsewhere(database, engine):
    with scheduler_processes() as procs:
        hung = faults.node(
            database,
            procs,
            "hung",
            hold=True,
            threads=3,
            ticks=2,
            tick_ms=100,
            shutdown_wait_ms=int(SHUTDOWN_WAIT_S * 1000),
        )
        hung.start()
        _hold_running(engine, hung)
        # the other jobs of the same process keep running while one hangs
        since = time.time_ns() // 1000
        wait_until(
            lambda: all(
                sum(r.at_us > since for r in faults.runs(engine, tick_name(i))) >= 5 for i in range(2)
            ),
            timeout=30,
            message="both recurring jobs ran five times beside the hung one",
        )
        report = hung.stop()
        assert faults.row(engine, HOLD_TASK, "h").picked_by == "hung"  # abandoned, still picked
        rescuer = faults.node(database, procs, "rescuer")
        rescuer.start()
        wait_until(
            lambda: faults.row(engine, HOLD_TASK, "h") is None,
            timeout=30,
            message="revived and run elsewhere",
        )
        rescuer_report = rescuer.stop()

    # both phases waited out, one after the other, and then the execution abandoned: no third wait
    assert report["stop_seconds"] >= 2 * SHUTDOWN_WAIT_S, report["stop_seconds"]
    stderr = report["stderr"]
    phases = [
        stderr.find("executions still running after"),
        stderr.find("abandoning executions still running"),
    ]
    assert -1 < phases[0] < phases[1], stderr
    assert stderr.count("waiting up to") == 1 and stderr.count("abandoning executions") == 1, stderr
    assert _hold_runs(engine) == [("hung", 2), ("rescuer", 4)]
    assert rescuer_report["events"].get("DEAD_EXECUTION") == 1
