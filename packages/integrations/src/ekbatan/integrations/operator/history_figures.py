"""The overview's figures from the execution history (``<table>_history``): per task, runs and
failures over the last hour and the last day and the p50/p95 duration over the day; per node,
the runs it finished in the last hour.

The day's figures are the client's own :meth:`~SchedulerClient.history_summary` (one grouped
read along the ``finished`` index, then each task's newest durations along
``(task_name, finished)``), as ``ekbatan tasks history`` shows them; the hour's are one more
grouped read of the last hour, by task and node. A missed-slots row is not a run: it is counted
in neither runs nor failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import RunResult, SchedulerClient, history_table_name
from ekbatan.integrations.operator.listing import table_of

__all__ = ["HistoryFigures", "NodeRuns", "TaskHistoryFigures", "read_history_figures"]

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


@dataclass(frozen=True)
class TaskHistoryFigures:
    """One task's finished runs; a failure is any run that did not succeed (failed, dead,
    revived or abandoned)."""

    runs_hour: int = 0
    failures_hour: int = 0
    runs_day: int = 0
    failures_day: int = 0
    #: nearest-rank percentiles of the day's newest runs (at most 1,000 of them)
    p50_ms: float | None = None
    p95_ms: float | None = None


@dataclass(frozen=True)
class NodeRuns:
    """The runs one node (``picked_by``) finished in the last hour."""

    picked_by: str | None
    runs: int
    last_finished: datetime | None


@dataclass(frozen=True)
class HistoryFigures:
    by_task: dict[str, TaskHistoryFigures]
    #: by node name; runs of a node that recorded no name (``picked_by`` NULL) last
    nodes: list[NodeRuns]


def read_history_figures(client: SchedulerClient, now: datetime) -> HistoryFigures | None:
    """The figures at ``now``; None when there is no history table (history is off)."""
    table = table_of(history_table_name(client.table_name), "task_name", "picked_by", "finished", "result")
    try:
        day = client.history_summary(now - DAY)
        with client.repository.engine.connect() as connection:
            hour = _hour_by_task_and_node(connection, table, client, now)
    except sa.exc.DBAPIError:
        return None  # no history table: the schedulers were never migrated for it
    hour_by_task: dict[str, _Counts] = {}
    for (task, _node), n in hour.items():
        total = hour_by_task.setdefault(task, _Counts())
        total.runs += n.runs
        total.failures += n.failures
    by_task = {
        s.task_name: TaskHistoryFigures(
            runs_hour=hour_by_task.get(s.task_name, _Counts()).runs,
            failures_hour=hour_by_task.get(s.task_name, _Counts()).failures,
            runs_day=s.runs,
            failures_day=s.failures,
            p50_ms=s.p50_ms,
            p95_ms=s.p95_ms,
        )
        for s in day
        if s.runs  # a task with only missed slots ran nothing
    }
    return HistoryFigures(by_task, _by_node(hour))


@dataclass
class _Counts:
    runs: int = 0
    failures: int = 0
    last_finished: datetime | None = None


def _hour_by_task_and_node(
    connection: sa.Connection, table: sa.TableClause, client: SchedulerClient, now: datetime
) -> dict[tuple[str, str | None], _Counts]:
    d = client.repository.dialect
    c = table.c
    run = c.result != RunResult.MISSED.value
    failure = c.result.notin_([RunResult.MISSED.value, RunResult.SUCCEEDED.value])

    def count(condition: Any) -> Any:
        return sa.func.sum(sa.case((condition, 1), else_=0))

    statement = (
        sa.select(
            c.task_name,
            c.picked_by,
            count(run),
            count(failure),
            sa.func.max(sa.case((run, c.finished), else_=None)),
        )
        .where(c.finished >= d.encode_time(now - HOUR))
        .group_by(c.task_name, c.picked_by)
    )
    return {
        (r[0], r[1]): _Counts(int(r[2] or 0), int(r[3] or 0), d.decode_time(r[4]))
        for r in connection.execute(statement).all()
    }


def _by_node(counts: dict[tuple[str, str | None], _Counts]) -> list[NodeRuns]:
    nodes: dict[str | None, NodeRuns] = {}
    for (_task, node), n in counts.items():
        if n.runs == 0:
            continue  # only missed slots, which are no run
        seen = nodes.get(node)
        runs, last = n.runs, n.last_finished
        if seen is not None:
            runs += seen.runs
            last = max((t for t in (last, seen.last_finished) if t is not None), default=None)
        nodes[node] = NodeRuns(node, runs, last)
    return sorted(nodes.values(), key=lambda n: (n.picked_by is None, n.picked_by or ""))
