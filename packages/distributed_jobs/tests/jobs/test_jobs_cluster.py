"""Two ``JobRegistry`` nodes in two OS processes on one database.

* Three jobs, both nodes registering all three: every slot runs exactly once — no fencing
  token or slot twice, no two runs of one job overlapping, no slot skipped.
* Crash recovery: ``kill -9`` the node running a long job (heartbeat 1 s ×
  4 missed); the surviving node runs the job again once the row is old enough to be dead.

The nodes are ``jobs_cluster_node.py`` next to this file; each run of a job is a row in
``job_runs``, which the test reads.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from testsupport import IsolatedDatabase, wait_until

REPO_ROOT = Path(__file__).resolve().parents[4]
NODE_SCRIPT = Path(__file__).resolve().with_name("jobs_cluster_node.py")
sys.path.insert(0, str(NODE_SCRIPT.parent))
from jobs_cluster_node import JOB_RUNS, LONG_JOB, METADATA, SLOT_JOBS  # noqa: E402

pytestmark = pytest.mark.cluster


class Node:
    """A node process: JSON lines from its stdout on a queue, commands to its stdin."""

    def __init__(self, url: str, node: str, prefix: str, scenario: str, *extra: str) -> None:
        self.name = node
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 — closed by nodes()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        args = [sys.executable, str(NODE_SCRIPT), "--url", url, "--node", node, "--prefix", prefix]
        self.process = subprocess.Popen(
            [*args, "--scenario", scenario, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.lines.put(json.loads(line))

    def wait_for(self, event: str, timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.name}: no {event!r} within {timeout}s; stderr:\n{self.errors()}")
            try:
                line = self.lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    raise AssertionError(
                        f"{self.name} exited ({self.process.returncode}) before {event!r}; stderr:\n{self.errors()}"
                    ) from None
                continue
            if line.get("event") == event:
                return line

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def stop(self, timeout: float = 15) -> None:
        self.send("stop")
        self.wait_for("stopped", timeout)
        assert self.process.wait(timeout) == 0, self.errors()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL: no shutdown, no completion, no last heartbeat
        self.process.wait(10)

    def close(self) -> None:
        self._reader.join(5)  # the process is gone: its stdout reaches the end
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stream.close()

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-4000:]


@contextlib.contextmanager
def nodes(*specs: tuple) -> Iterator[list[Node]]:
    spawned: list[Node] = []
    try:
        for spec in specs:
            spawned.append(Node(*spec))
        yield spawned
    finally:
        for node in spawned:
            node.kill()
            node.close()


@pytest.fixture
def runs_table(database: IsolatedDatabase, engine: sa.Engine) -> sa.Engine:
    METADATA.create_all(engine)
    return engine


def recorded(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(JOB_RUNS).order_by(JOB_RUNS.c.id)).mappings()]


@pytest.mark.dialects("postgres", "mariadb", "sqlite")
def test_three_jobs_on_two_nodes_run_every_slot_exactly_once(database, runs_table):
    prefix = f"c{uuid.uuid4().hex[:6]}"
    names = {f"{prefix}-{job}" for job in SLOT_JOBS}

    def enough() -> bool:
        counts = defaultdict(int)
        for run in recorded(runs_table):
            if run["ended"] is not None:
                counts[run["job"]] += 1
        return all(counts[name] >= 8 for name in names)

    with nodes(
        (database.url, "node-a", prefix, "slots"),
        (database.url, "node-b", prefix, "slots"),
    ) as (a, b):
        for node in (a, b):
            node.wait_for("built")
        for node in (a, b):
            node.send("start")
        for node in (a, b):
            node.wait_for("started")
        wait_until(enough, timeout=20, interval=0.1, message="eight completed runs of every job")
        first_stop = time.time()  # a stops first, b after it
        for node in (a, b):
            node.stop()
        logs = "".join(f"--- {node.name} stderr:\n{node.errors()}\n" for node in (a, b))

    runs = recorded(runs_table)
    assert {r["job"] for r in runs} == names
    assert {r["node"] for r in runs} <= {"node-a", "node-b"}
    by_job: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        by_job[run["job"]].append(run)
    for job, job_runs in by_job.items():
        tokens = [r["token"] for r in job_runs]
        slots = [r["slot"] for r in job_runs]
        assert len(set(tokens)) == len(tokens), f"{job}: a fencing token ran twice: {sorted(tokens)}"
        assert len(set(slots)) == len(slots), f"{job}: a slot ran twice: {sorted(slots)}"
        ordered = sorted(job_runs, key=lambda r: r["token"])
        # claim (+1) then completion (+1) per run. One exception: a claim node-a had queued but
        # not started when it stopped is given back (claim +1, give-back +1), and node-b runs
        # that same slot next. Any other step means a slot lost or doubled.
        for earlier, later in itertools.pairwise(ordered):
            step = later["token"] - earlier["token"]
            given_back = step == 4 and later["node"] == "node-b" and later["started"] >= first_stop
            assert step == 2 or given_back, (
                f"{job}: tokens by node {[(r['token'], r['node']) for r in ordered]}\n{logs}"
            )
        for earlier, later in itertools.pairwise(ordered):
            assert earlier["ended"] is not None and later["started"] >= earlier["ended"], (
                f"{job}: runs overlapped: {earlier} and {later}"
            )


@pytest.mark.slow
@pytest.mark.dialects("postgres")
def test_long_job_of_a_killed_node_runs_again_on_the_other_node(database, runs_table):
    prefix = f"k{uuid.uuid4().hex[:6]}"
    job = f"{prefix}-{LONG_JOB}"
    tuning = ("--poll-ms", "200", "--heartbeat-ms", "1000", "--missed-heartbeats", "4")

    def runs_on(node: str) -> list[dict]:
        return [r for r in recorded(runs_table) if r["job"] == job and r["node"] == node]

    with nodes(
        (database.url, "victim", prefix, "long", *tuning),
        (database.url, "survivor", prefix, "long", *tuning),
    ) as (victim, survivor):
        victim.wait_for("built")
        survivor.wait_for("built")
        victim.send("start")
        victim.wait_for("started")
        wait_until(lambda: runs_on("victim"), timeout=10, message="the victim runs the long job")
        survivor.send("start")
        survivor.wait_for("started")
        assert runs_on("survivor") == []  # the row is held: the survivor cannot claim it

        victim.kill()
        killed = time.monotonic()
        rescued = wait_until(
            lambda: runs_on("survivor"), timeout=60, interval=0.05, message="the survivor runs the job again"
        )
        elapsed = time.monotonic() - killed
        survivor.stop()

    # dead once the last heartbeat (≤ 1 s before the kill) is 4 s old: never revived earlier
    assert elapsed >= 2.0, elapsed
    first = runs_on("victim")
    assert len(first) == 1 and first[0]["ended"] is None  # killed part-way: the run never finished
    assert len(rescued) == 1
    assert rescued[0]["token"] > first[0]["token"]  # revival and the new claim moved the fencing token on
    assert rescued[0]["slot"] != first[0]["slot"]  # revived "to now": a new slot, not the killed one
