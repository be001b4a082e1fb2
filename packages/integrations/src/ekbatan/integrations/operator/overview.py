"""The overview: per task name, how many executions are in each state, the last success and
failure, the next due time and the figures of its history; the scheduler nodes seen; and, for
a runtime, its event pipeline — from grouped queries only (no row is loaded one by one)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import HoldState, SchedulerClient, TaskPause, TaskSummary
from ekbatan.integrations.operator.background_reads import FIRST_WAIT, BackgroundRead, Reading
from ekbatan.integrations.operator.eventlog_shards import EventlogShards
from ekbatan.integrations.operator.history_figures import (
    HistoryFigures,
    TaskHistoryFigures,
    read_history_figures,
)
from ekbatan.integrations.operator.nodes import NodeSeen, nodes_seen
from ekbatan.integrations.operator.pipeline import ShardPipeline, read_pipeline

__all__ = ["Overview", "OverviewReads", "TaskOverview", "read_overview"]


@dataclass(frozen=True)
class TaskOverview:
    """One task name's counts; ``scheduled`` is waiting without failures (as the client's
    summary counts it), ``failing`` waiting after failures, ``due`` waiting and due now."""

    task_name: str
    scheduled: int = 0
    due: int = 0
    running: int = 0
    failing: int = 0
    paused: int = 0
    dead: int = 0
    #: paused as a whole (its executions stay in ``scheduled_tasks`` and are not claimed)
    task_pause: TaskPause | None = None
    last_success: datetime | None = None
    last_failure: datetime | None = None
    next_run: datetime | None = None
    #: its finished runs (None: no history table)
    history: TaskHistoryFigures | None = None

    @property
    def total(self) -> int:
        return self.scheduled + self.running + self.failing + self.paused + self.dead


@dataclass(frozen=True)
class Overview:
    tasks: list[TaskOverview]
    #: whether the history table is there (the history figures are read from it)
    history_on: bool
    nodes: list[NodeSeen]
    #: per shard; None when the source is a bare client (no runtime, no shards)
    pipeline: list[ShardPipeline] | None
    #: the oldest of the scanning reads shown (the counts per task, the history's day); the
    #: page says how old it is once it comes from an earlier request
    counted: Reading[object] | None = None
    #: the counts per task are being read for the first time (a big table): no task rows yet
    counting: bool = False


def _summaries(client: SchedulerClient) -> list[TaskSummary]:
    return client.get_scheduled_executions_summary_by_task(due_at=datetime.now(UTC))


def _history(client: SchedulerClient) -> HistoryFigures | None:
    return read_history_figures(client, datetime.now(UTC))


class _Shipped:
    """``OverviewReads()``'s wait when none is given: the class's ``first_wait``."""


_SHIPPED = _Shipped()


class OverviewReads:
    """The overview's two reads that group whole tables, kept by one app between requests
    (see :mod:`~ekbatan.integrations.operator.background_reads`)."""

    #: how long a request waits for the first counts before its page says it is counting
    first_wait: float | None = FIRST_WAIT

    def __init__(self, first_wait: float | _Shipped | None = _SHIPPED) -> None:
        if isinstance(first_wait, _Shipped):
            first_wait = type(self).first_wait
        self.summaries: BackgroundRead[SchedulerClient, list[TaskSummary]] = BackgroundRead(
            _summaries, first_wait=first_wait
        )
        self.history: BackgroundRead[SchedulerClient, HistoryFigures | None] = BackgroundRead(
            _history, first_wait=first_wait
        )


def read_overview(
    client: SchedulerClient,
    now: datetime,
    shards: EventlogShards | None = None,
    reads: OverviewReads | None = None,
) -> Overview:
    """Every task name with an execution in ``scheduled_tasks`` or the held table, paused, or
    with a run in the last day's history; the nodes; the event pipeline of ``shards``.
    With ``reads``, the counts per task and the history's figures may come from an earlier
    request while they are read again in the background (big tables), or still be counted
    for the first time (``counting``: no task rows yet); without, read now."""
    reads = reads or OverviewReads(first_wait=None)
    # both first reads at once, and one wait for the two
    reads.summaries.begin(client)
    reads.history.begin(client)
    wait = reads.summaries.first_wait
    until = None if wait is None else time.monotonic() + wait
    counted = reads.summaries.get(client, until)
    figures = reads.history.get(client, until)
    pipeline = read_pipeline(shards, now) if shards is not None else None
    if counted is None or figures is None:
        nodes = nodes_seen(client.claims_by_node(), None, now)
        return Overview([], figures is not None and figures.value is not None, nodes, pipeline, counting=True)
    summaries = {s.task_name: s for s in counted.value}
    held = _held_counts(client)
    pauses = {p.task_name: p for p in _pauses(client)}
    history = figures.value
    ran = history.by_task if history is not None else {}
    names = sorted(set(summaries) | {name for name, _ in held} | set(pauses) | set(ran))
    tasks = [
        replace(
            _overview(name, summaries.get(name), held, pauses.get(name)),
            history=None if history is None else ran.get(name, TaskHistoryFigures()),
        )
        for name in names
    ]
    nodes = nodes_seen(client.claims_by_node(), None if history is None else history.nodes, now)
    oldest: Reading[object] = min((counted, figures), key=lambda r: r.read_at)
    return Overview(tasks, history is not None, nodes, pipeline, oldest)


def _overview(
    name: str,
    summary: TaskSummary | None,
    held: dict[tuple[str, HoldState], int],
    pause: TaskPause | None,
) -> TaskOverview:
    paused, dead = held.get((name, HoldState.PAUSED), 0), held.get((name, HoldState.DEAD), 0)
    if summary is None:
        return TaskOverview(name, paused=paused, dead=dead, task_pause=pause)
    return TaskOverview(
        name,
        scheduled=summary.scheduled_count,
        due=summary.due_count or 0,
        running=summary.running_count,
        failing=summary.failing_count,
        task_pause=pause,
        last_success=summary.last_success,
        last_failure=summary.last_failure,
        next_run=summary.earliest_execution_time,
        paused=paused,
        dead=dead,
    )


def _held_counts(client: SchedulerClient) -> dict[tuple[str, HoldState], int]:
    try:
        return client.count_held()
    except sa.exc.DBAPIError:
        return {}  # no held table (not migrated since it came): nothing is held


def _pauses(client: SchedulerClient) -> list[TaskPause]:
    try:
        return client.paused_tasks()
    except sa.exc.DBAPIError:
        return []  # no pauses table yet: nothing is paused
