"""One execution as the detail page shows it: its row (in ``scheduled_tasks``, or held), its
task's pause, and its runs from the execution history (newest first) when that table exists.
An execution that is gone (it succeeded, or was cancelled) still has its page while the history
holds runs of it: what happened to it is what an operator comes to read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import HeldExecution, HistoryEntry, SchedulerClient, TaskPause
from ekbatan.integrations.task_views import TaskView, decode_json

__all__ = ["HISTORY_LIMIT", "DataText", "ExecutionDetail", "data_text", "read_detail"]

#: the runs the detail page shows
HISTORY_LIMIT = 50
#: the bytes of task data shown (the rest is cut, with its size said)
DATA_LIMIT = 64 * 1024


@dataclass(frozen=True)
class DataText:
    """Task data as text: ``json`` pretty-printed when it decodes as JSON, ``raw`` the bytes as
    UTF-8 (bytes that are not UTF-8 replaced) and ``hex`` when they are not UTF-8 at all."""

    size: int
    json: str | None
    raw: str
    hex: str | None
    cut: bool


def data_text(raw: bytes | None) -> DataText | None:
    """Never unpickles: pickled data shows as its bytes."""
    if raw is None:
        return None
    shown = raw[:DATA_LIMIT]
    is_json, value = decode_json(raw)
    pretty = json.dumps(value, indent=2, ensure_ascii=False) if is_json else None
    try:
        text, hexed = shown.decode("utf-8"), None
    except UnicodeDecodeError:
        text, hexed = shown.decode("utf-8", "replace"), shown.hex()
    return DataText(len(raw), pretty, text, hexed, len(raw) > DATA_LIMIT)


@dataclass(frozen=True)
class ExecutionDetail:
    task_name: str
    instance_id: str
    #: its row of ``scheduled_tasks``; None when it is held (paused one by one, or dead)
    view: TaskView | None
    held: HeldExecution | None
    task_pause: TaskPause | None
    #: newest first; None when there is no history table
    history: list[HistoryEntry] | None

    @property
    def finished(self) -> bool:
        """Neither scheduled nor held any more: only its recorded runs are left."""
        return self.view is None and self.held is None

    @property
    def data(self) -> DataText | None:
        if self.view is not None:
            return data_text(self.view.raw_data)
        return data_text(self.held.raw_data) if self.held is not None else None

    def heartbeat_age(self, now: datetime) -> timedelta | None:
        if self.view is None or self.view.last_heartbeat is None:
            return None
        return max(timedelta(0), now - self.view.last_heartbeat)


def read_detail(
    client: SchedulerClient, task: str, instance: str, *, history_limit: int = HISTORY_LIMIT
) -> ExecutionDetail | None:
    """None when the execution is neither in ``scheduled_tasks`` nor held, nor has a run in
    the history."""
    found = client.get_scheduled_execution((task, instance))
    view = None if found is None else TaskView.of(found.execution)
    held = _held(client, task, instance) if view is None else None
    history = _history(client, task, instance, history_limit)
    if view is None and held is None and not history:
        return None
    pause = next((p for p in _pauses(client) if p.task_name == task), None)
    return ExecutionDetail(task, instance, view, held, pause, history)


def _held(client: SchedulerClient, task: str, instance: str) -> HeldExecution | None:
    try:
        return client.get_held_execution(task, instance)
    except sa.exc.DBAPIError:
        return None  # no held table: nothing is held


def _pauses(client: SchedulerClient) -> list[TaskPause]:
    try:
        return client.paused_tasks()
    except sa.exc.DBAPIError:
        return []


def _history(client: SchedulerClient, task: str, instance: str, limit: int) -> list[HistoryEntry] | None:
    try:
        return client.history(task, instance, limit=limit)
    except sa.exc.DBAPIError:
        return None  # no history table (not migrated since it came)
