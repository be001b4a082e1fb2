"""What the scheduler fault tests share: a database holding ``scheduled_tasks`` and
``fault_runs``, and ``scheduler_fault_node.py`` processes on it with common options.

Heartbeats every 0.5 s, dead after 4 missed (2 s), unless a test says otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import Execution, SchedulerClient, create_table
from testsupport import IsolatedDatabase
from testsupport.scheduler_process import SchedulerProcess

NODE = Path(__file__).resolve().with_name("scheduler_fault_node.py")
sys.path.insert(0, str(NODE.parent))
from scheduler_fault_node import METADATA  # noqa: E402

HB_S = 0.5
MISSED_LIMIT = 4
OPTIONS = {"hb_ms": int(HB_S * 1000), "missed_limit": MISSED_LIMIT, "poll_ms": 50}


def fault_engine(database: IsolatedDatabase) -> Iterator[sa.Engine]:
    """An engine on a fresh database holding ``scheduled_tasks`` and ``fault_runs`` (the tests'
    ``engine`` fixture)."""
    eng = database.engine()
    create_table(eng)
    METADATA.create_all(eng)
    yield eng
    eng.dispose()


def node(
    database: IsolatedDatabase, procs: list[SchedulerProcess], name: str, **options: object
) -> SchedulerProcess:
    proc = SchedulerProcess(database.url, name, script=NODE, **{**OPTIONS, **options})
    procs.append(proc)
    return proc


def runs(engine: sa.Engine, task: str | None = None) -> list[sa.Row]:
    query = "SELECT task, instance, pid, node, version, at_us FROM fault_runs"
    params = {}
    if task is not None:
        query += " WHERE task = :task"
        params["task"] = task
    with engine.connect() as conn:
        return list(conn.execute(sa.text(query + " ORDER BY id"), params))


def scalar(engine: sa.Engine, query: str, **params: object) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(query), params).scalar_one()


def row(engine: sa.Engine, task: str, instance_id: str) -> Execution | None:
    return SchedulerClient(engine).repository.get_execution(task, instance_id)


def status(proc: SchedulerProcess) -> dict[str, int]:
    proc.send("status")
    return proc.expect("status", 30)["events"]
