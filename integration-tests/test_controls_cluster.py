"""Pauses and dead letters across real scheduler processes sharing one database: a pause made
by one client holds on every node and across a SIGKILL, a resumed recurring job neither loses
its schedule nor runs a slot twice, and dead letters outlive the process that made them."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import HoldState, SchedulerClient, TaskInstance
from testsupport import IsolatedDatabase, wait_until
from testsupport.scheduler_process import scheduler_processes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scheduler_faults as faults
from scheduler_fault_node import FLAKY_TASK, WORK_TASK, tick_name

pytestmark = [pytest.mark.cluster, pytest.mark.dialects("postgres", "mariadb", "sqlite")]

TICK = tick_name(0)
#: the nodes poll every 50 ms and read the pauses at most every 0.9 polls: a pause holds on
#: every node well within this (a run already going when it was made finishes first)
PAUSE_SEEN_S = 3.0


@pytest.fixture
def engine(database: IsolatedDatabase) -> Iterator[sa.Engine]:
    yield from faults.fault_engine(database)


def work_ran(engine: sa.Engine, client: SchedulerClient, label: str) -> None:
    """Schedule a ``work`` execution and wait until a node ran it: the nodes are polling."""
    instance = f"{label}-{uuid.uuid4().hex[:8]}"
    client.schedule(TaskInstance(WORK_TASK, instance))
    wait_until(
        lambda: any(r.instance == instance for r in faults.runs(engine, WORK_TASK)),
        timeout=30,
        interval=0.05,
        message=f"work {instance} ran",
    )


def test_a_pause_holds_on_every_node_and_through_a_sigkill_and_no_slot_runs_twice(database, engine):
    client = SchedulerClient(engine)
    with scheduler_processes() as procs:
        a = faults.node(database, procs, "node-a", ticks=1, tick_ms=100)
        b = faults.node(database, procs, "node-b", ticks=1, tick_ms=100)
        a.start()
        b.start()
        wait_until(lambda: len(faults.runs(engine, TICK)) >= 5, timeout=30, interval=0.05, message="ticks")

        assert client.pause_task(TICK, reason="cluster test", by="test") is True
        time.sleep(PAUSE_SEEN_S)  # every node has read the pause by now (see PAUSE_SEEN_S)
        paused_at = len(faults.runs(engine, TICK))
        # the nodes go on polling (other work runs) and still leave the paused job alone
        for n in range(3):
            work_ran(engine, client, f"while-paused-{n}")
        a.signal(signal.SIGKILL)  # a node dies while the job is paused
        assert a.wait(30) == -signal.SIGKILL
        work_ran(engine, client, "after-kill")
        assert len(faults.runs(engine, TICK)) == paused_at, "a paused job ran"
        row = faults.row(engine, TICK, "recurring")
        assert row is not None and not row.picked  # waiting with its due time, not lost

        released = client.resume_task(TICK)
        assert released.task_pause_lifted
        wait_until(
            lambda: len(faults.runs(engine, TICK)) >= paused_at + 5,
            timeout=30,
            interval=0.05,
            message="the resumed job runs again on the surviving node",
        )
        b.stop()
    runs = faults.runs(engine, TICK)
    after = runs[paused_at:]
    assert {r.node for r in after} == {"node-b"}
    # every run held the row at a version of its own: no slot ran twice
    versions = [r.version for r in runs]
    assert len(versions) == len(set(versions)), sorted(versions)


def test_dead_letters_outlive_a_sigkilled_node_and_a_retry_runs_them_on_another(database, engine, tmp_path):
    passes = tmp_path / "passes"  # absent: flaky fails
    client = SchedulerClient(engine)
    dead_key = (FLAKY_TASK, HoldState.DEAD)
    with scheduler_processes() as procs:
        first = faults.node(database, procs, "first", pass_file=passes)
        first.start()
        for n in range(5):
            client.schedule(TaskInstance(FLAKY_TASK, f"f{n}"))
        wait_until(
            lambda: client.count_held().get(dead_key) == 5,
            timeout=30,
            interval=0.05,
            message="five dead letters",
        )
        first.signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL
        tried = len(faults.runs(engine, FLAKY_TASK))
        assert tried == 10  # each ran, was retried once, and was kept dead

        passes.touch()  # whatever was wrong is fixed
        second = faults.node(database, procs, "second", pass_file=passes)
        second.start()
        work_ran(engine, client, "second-polls")
        # a new node does not run dead letters by itself
        assert client.count_held().get(dead_key) == 5
        assert len(faults.runs(engine, FLAKY_TASK)) == tried
        held = client.get_held_executions(state="dead", task_name=FLAKY_TASK)
        assert sorted(h.instance_id for h in held) == [f"f{n}" for n in range(5)]
        assert all("passes is missing" in (h.error.message or "") for h in held)

        back = client.retry_dead(FLAKY_TASK)
        assert sorted(back.executions) == [f"f{n}" for n in range(5)]
        wait_until(
            lambda: (
                len(faults.runs(engine, FLAKY_TASK)) == tried + 5
                and client.get_scheduled_executions_for_task(FLAKY_TASK) == []
            ),
            timeout=30,
            interval=0.05,
            message="each retried dead letter ran once, on the new node, and succeeded",
        )
        second.stop()
    retried = faults.runs(engine, FLAKY_TASK)[tried:]
    assert sorted(r.instance for r in retried) == [f"f{n}" for n in range(5)]
    assert {r.node for r in retried} == {"second"}
    assert client.count_held().get(dead_key) is None
