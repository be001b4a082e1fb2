"""The overview's figures from the execution history (``<table>_history``): per task, runs and
failures over the last hour and the last day and the p50/p95 duration over the day; per node,
the runs it finished in the last hour.

One grouped read of the day's rows (by task and node, the hour counted within it) walks the
``finished`` index, so rows older than a day — most of a week's history — are never read; its
cost grows with the runs of the last day. Then, per task that ran, its newest durations (at most
:data:`SAMPLE`, as ``ekbatan history summary`` takes them) along the ``(task_name, finished)``
index. A missed-slots row is not a run: it is counted in neither runs nor failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import RunResult, SchedulerClient, history_table_name
from ekbatan.integrations.operator.listing import table_of

__all__ = ["HistoryFigures", "NodeRuns", "TaskHistoryFigures", "read_history_figures"]

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
#: durations read per task for its percentiles: its newest runs of the day
SAMPLE = 1_000


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
    table = table_of(
        history_table_name(client.table_name), "task_name", "picked_by", "finished", "result", "duration_ms"
    )
    try:
        with client.repository.engine.connect() as connection:
            counts = _day_by_task_and_node(connection, table, client, now)
            ran = sorted({task for task, _ in counts})
            durations = {task: _newest_durations(connection, table, client, task, now - DAY) for task in ran}
    except sa.exc.DBAPIError:
        return None  # no history table: the schedulers were never migrated for it
    return HistoryFigures(_by_task(counts, durations), _by_node(counts))


@dataclass
class _Counts:
    runs_day: int = 0
    failures_day: int = 0
    runs_hour: int = 0
    failures_hour: int = 0
    last_finished: datetime | None = None


def _day_by_task_and_node(
    connection: sa.Connection, table: sa.TableClause, client: SchedulerClient, now: datetime
) -> dict[tuple[str, str | None], _Counts]:
    d = client.repository.dialect
    c = table.c
    hour = d.encode_time(now - HOUR)
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
            count(sa.and_(run, c.finished >= hour)),
            count(sa.and_(failure, c.finished >= hour)),
            sa.func.max(sa.case((run, c.finished), else_=None)),
        )
        .where(c.finished >= d.encode_time(now - DAY))
        .group_by(c.task_name, c.picked_by)
    )
    return {
        (r[0], r[1]): _Counts(
            int(r[2] or 0), int(r[3] or 0), int(r[4] or 0), int(r[5] or 0), d.decode_time(r[6])
        )
        for r in connection.execute(statement).all()
    }


def _newest_durations(
    connection: sa.Connection, table: sa.TableClause, client: SchedulerClient, task: str, since: datetime
) -> list[int]:
    c = table.c
    statement = (
        sa.select(c.duration_ms)
        .where(
            c.task_name == task,
            c.finished >= client.repository.dialect.encode_time(since),
            c.result != RunResult.MISSED.value,
        )
        .order_by(c.finished.desc())
        .limit(SAMPLE)
    )
    return sorted(int(r[0]) for r in connection.execute(statement).all() if r[0] is not None)


def _percentile(values: list[int], share: float) -> float | None:
    """The nearest-rank percentile of sorted ``values`` (as ``ekbatan history summary``)."""
    if not values:
        return None
    return float(values[max(0, math.ceil(share * len(values)) - 1)])


def _by_task(
    counts: dict[tuple[str, str | None], _Counts], durations: dict[str, list[int]]
) -> dict[str, TaskHistoryFigures]:
    totals: dict[str, _Counts] = {}
    for (task, _node), n in counts.items():
        total = totals.setdefault(task, _Counts())
        total.runs_day += n.runs_day
        total.failures_day += n.failures_day
        total.runs_hour += n.runs_hour
        total.failures_hour += n.failures_hour
    return {
        task: TaskHistoryFigures(
            runs_hour=t.runs_hour,
            failures_hour=t.failures_hour,
            runs_day=t.runs_day,
            failures_day=t.failures_day,
            p50_ms=_percentile(durations.get(task, []), 0.50),
            p95_ms=_percentile(durations.get(task, []), 0.95),
        )
        for task, t in totals.items()
    }


def _by_node(counts: dict[tuple[str, str | None], _Counts]) -> list[NodeRuns]:
    nodes: dict[str | None, NodeRuns] = {}
    for (_task, node), n in counts.items():
        if n.runs_hour == 0:
            continue  # nothing finished in the hour (or only missed slots, which are no run)
        seen = nodes.get(node)
        runs, last = n.runs_hour, n.last_finished
        if seen is not None:
            runs += seen.runs
            last = max((t for t in (last, seen.last_finished) if t is not None), default=None)
        nodes[node] = NodeRuns(node, runs, last)
    return sorted(nodes.values(), key=lambda n: (n.picked_by is None, n.picked_by or ""))
