"""The operator's view of ``scheduled_tasks``: listing, showing and changing executions.

Shared by the ``ekbatan tasks`` command and any framework command that shows the same view.
Everything goes through the engine's :class:`SchedulerClient`; nothing here knows the tasks'
Python types, so ``task_data`` stays bytes: previewed as JSON when it decodes as JSON, as a hex
prefix otherwise — never unpickled, since unpickling runs code chosen by whoever wrote the row.

A picked execution is being run by a scheduler right now. Changing it is refused unless
``force=True``; a forced change is still a versioned write (it changes the row only at the
version just read), and the scheduler running it keeps running it but cannot record its result
— its own versioned writes no longer match.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ekbatan.distributed_jobs.scheduler import (
    Execution,
    ExecutionTimeAndId,
    ScheduledExecutionsFilter,
    SchedulerClient,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)
from ekbatan.local_event_handler import DEFAULT_FANOUT_NAME, DEFAULT_HANDLING_NAME

__all__ = [
    "PIPELINE_JOBS",
    "DeadWindow",
    "TaskFilter",
    "TaskPickedError",
    "TaskView",
    "cancel_task",
    "data_preview",
    "decode_json",
    "get_task",
    "list_tasks",
    "reschedule_task",
    "run_task_now",
]

PREVIEW_WIDTH = 40
HEX_PREFIX_BYTES = 16
_PAGE = 500


#: the event pipeline's jobs: a worker holding one runs rounds until it stops, never "finishing"
PIPELINE_JOBS = (DEFAULT_FANOUT_NAME, DEFAULT_HANDLING_NAME)


@dataclass(frozen=True)
class DeadWindow:
    """How old a heartbeat gets before a running worker revives the execution elsewhere."""

    heartbeat_interval: timedelta
    missed_heartbeats: int
    #: False when the interval is the default because the configuration was not read (``--url``)
    configured: bool = True

    @property
    def length(self) -> timedelta:
        return self.heartbeat_interval * self.missed_heartbeats

    def describe(self) -> str:
        assumed = "" if self.configured else ", the defaults"
        return (
            f"the dead window of {_seconds(self.length)} (heartbeat interval "
            f"{_seconds(self.heartbeat_interval)} × {self.missed_heartbeats} missed heartbeats{assumed})"
        )


class TaskPickedError(RuntimeError):
    """The execution is picked (running) and the change was not forced."""

    def __init__(self, view: TaskView) -> None:
        self.view = view
        by = f" by {view.picked_by}" if view.picked_by else ""
        beat = f", last heartbeat {_iso(view.last_heartbeat, 'seconds')}" if view.last_heartbeat else ""
        super().__init__(f"{view.task_name}/{view.instance_id} is picked{by}{beat}: it is running now")

    def explain(self, now: datetime, window: DeadWindow) -> str:
        """Why it is refused and what happens next, from the heartbeat's age against the dead window."""
        view = self.view
        what = f"{view.task_name}/{view.instance_id} is picked by {view.picked_by or 'an unnamed scheduler'}"
        force = "or pass --force (its running execution then cannot record its result)"
        if view.last_heartbeat is None:
            return (
                f"refused: {what}, with no heartbeat yet: it has just started. Wait for it to finish, {force}"
            )
        age = max(timedelta(0), now - view.last_heartbeat)
        what += f", whose last heartbeat is {_seconds(age)} old"
        if age > window.length:
            # the dead-execution check runs every two heartbeat intervals on every worker
            return (
                f"refused: {what}, older than {window.describe()}: that worker looks gone, and a running "
                f"worker revives the execution at its next dead-execution check (every "
                f"{_seconds(window.heartbeat_interval * 2)}; none will while no worker runs). Wait for that, {force}"
            )
        if view.task_name in PIPELINE_JOBS:
            return (
                f"refused: {what}: it is one of the event pipeline's jobs, which a worker runs continuously for "
                f"as long as it holds the row and which never finish, so it is running already and there is "
                f"nothing to wait for. To move it anyway, pass --force (the worker's current rounds continue "
                f"until its heartbeats stop)"
            )
        revive = window.length - age
        return (
            f"refused: {what}, within {window.describe()}: it is running now. Wait for it to finish, {force}; "
            f"if its worker is gone, another worker revives it in about {_seconds(revive)}, once the "
            f"heartbeat is older than the dead window"
        )


def _seconds(value: timedelta) -> str:
    return f"{value.total_seconds():.0f}s"


def decode_json(raw: bytes | None) -> tuple[bool, Any]:
    """``(True, value)`` when ``raw`` is UTF-8 JSON, else ``(False, None)``. Never unpickles."""
    if raw is None:
        return False, None
    try:
        return True, json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False, None


def data_preview(raw: bytes | None, width: int = PREVIEW_WIDTH) -> str:
    """A one-line preview: compact JSON when it decodes, else ``hex:`` and the first bytes."""
    if raw is None:
        return ""
    is_json, value = decode_json(raw)
    if not is_json:
        more = "…" if len(raw) > HEX_PREFIX_BYTES else ""
        return f"hex:{raw[:HEX_PREFIX_BYTES].hex()}{more} ({len(raw)} bytes)"
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True)
class TaskView:
    """One row of ``scheduled_tasks`` as an operator sees it."""

    task_name: str
    instance_id: str
    execution_time: datetime
    picked: bool
    picked_by: str | None
    last_heartbeat: datetime | None
    last_success: datetime | None
    last_failure: datetime | None
    consecutive_failures: int
    version: int
    priority: int | None
    raw_data: bytes | None

    @classmethod
    def of(cls, execution: Execution) -> TaskView:
        return cls(
            task_name=execution.task_name,
            instance_id=execution.instance_id,
            execution_time=execution.execution_time,
            picked=execution.picked,
            picked_by=execution.picked_by,
            last_heartbeat=execution.last_heartbeat,
            last_success=execution.last_success,
            last_failure=execution.last_failure,
            consecutive_failures=execution.consecutive_failures,
            version=execution.version,
            priority=execution.priority,
            raw_data=execution.raw_data,
        )

    @property
    def failing(self) -> bool:
        return self.consecutive_failures > 0

    def is_due(self, now: datetime) -> bool:
        return not self.picked and self.execution_time <= now

    def preview(self, width: int = PREVIEW_WIDTH) -> str:
        return data_preview(self.raw_data, width)

    def as_dict(self, *, full_data: bool = False) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC; ``data`` is the decoded JSON, or null (see ``data_hex``)."""
        is_json, value = decode_json(self.raw_data)
        out: dict[str, Any] = {
            "task": self.task_name,
            "instance": self.instance_id,
            "execution_time": _iso(self.execution_time),
            "picked": self.picked,
            "picked_by": self.picked_by,
            "last_heartbeat": _iso(self.last_heartbeat),
            "last_success": _iso(self.last_success),
            "last_failure": _iso(self.last_failure),
            "consecutive_failures": self.consecutive_failures,
            "version": self.version,
            "priority": self.priority,
            "data_size": None if self.raw_data is None else len(self.raw_data),
            "data_preview": self.preview(),
        }
        if full_data:
            out["data"] = value if is_json else None
            out["data_hex"] = None if is_json or self.raw_data is None else self.raw_data.hex()
        return out


def _iso(value: datetime | None, timespec: str = "auto") -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat(timespec=timespec)


@dataclass(frozen=True)
class TaskFilter:
    """Which executions to list; the conditions combine (all must hold)."""

    task: str | None = None
    failing: bool = False
    picked: bool = False
    due: bool = False

    def accepts(self, view: TaskView, now: datetime) -> bool:
        return (not self.failing or view.failing) and (not self.due or view.is_due(now))


def list_tasks(
    client: SchedulerClient,
    task_filter: TaskFilter = TaskFilter(),
    *,
    limit: int = 100,
    now: datetime | None = None,
) -> tuple[list[TaskView], bool]:
    """Executions in due order (earliest first) matching ``task_filter``, at most ``limit``;
    the flag says whether more matched. Reads the table a page at a time."""
    now = datetime.now(UTC) if now is None else now
    base = ScheduledExecutionsFilter.all().with_picked(True if task_filter.picked else None)
    if task_filter.due:
        base = base.with_picked(False)
    found: list[TaskView] = []
    cursor: ExecutionTimeAndId | None = None
    while True:
        page_filter = base.with_limit(_PAGE)
        if cursor is not None:
            page_filter = page_filter.with_after(cursor)
        if task_filter.task is None:
            page = client.get_scheduled_executions(page_filter)
        else:
            page = client.get_scheduled_executions_for_task(task_filter.task, filter=page_filter)
        for row in page:
            view = TaskView.of(row.execution)
            if task_filter.due and view.execution_time > now:
                return found, False  # due order: nothing later can be due
            if task_filter.accepts(view, now):
                if len(found) == limit:
                    return found, True
                found.append(view)
        if len(page) < _PAGE:
            return found, False
        cursor = page[-1].cursor


def get_task(client: SchedulerClient, task: str, instance: str) -> TaskView:
    """The execution ``task``/``instance``; :class:`TaskInstanceNotFoundError` when absent."""
    found = client.get_scheduled_execution((task, instance))
    if found is None:
        raise TaskInstanceNotFoundError(task, instance)
    return TaskView.of(found.execution)


def _change(
    client: SchedulerClient,
    task: str,
    instance: str,
    force: bool,
    unpicked: Callable[[], object],
    forced: Callable[[Execution], None],
) -> TaskView:
    found = client.get_scheduled_execution((task, instance))
    if found is None:
        raise TaskInstanceNotFoundError(task, instance)
    view = TaskView.of(found.execution)
    if not view.picked:
        try:
            unpicked()
        except TaskInstanceCurrentlyExecutingError:
            raise TaskPickedError(get_task(client, task, instance)) from None
    elif force:
        forced(found.execution)
    else:
        raise TaskPickedError(view)
    return view


def reschedule_task(
    client: SchedulerClient, task: str, instance: str, when: datetime | timedelta, *, force: bool = False
) -> TaskView:
    """Move the execution to ``when`` (failure bookkeeping reset, as the client does); returns
    the row as it was. Picked ⇒ :class:`TaskPickedError` unless ``force``."""
    at = client.clock.now() + when if isinstance(when, timedelta) else when

    def forced(execution: Execution) -> None:
        client.repository.reschedule(
            execution, at, last_success=None, last_failure=None, consecutive_failures=0, notify=True
        )

    return _change(client, task, instance, force, lambda: client.reschedule((task, instance), at), forced)


def run_task_now(client: SchedulerClient, task: str, instance: str, *, force: bool = False) -> TaskView:
    """Make the execution due now; a scheduler picks it at its next poll (or at once when woken)."""
    return reschedule_task(client, task, instance, timedelta(0), force=force)


def cancel_task(client: SchedulerClient, task: str, instance: str, *, force: bool = False) -> TaskView:
    """Delete the execution; returns the row as it was. Picked ⇒ :class:`TaskPickedError` unless ``force``."""
    return _change(
        client,
        task,
        instance,
        force,
        lambda: client.cancel((task, instance)),
        lambda execution: client.repository.remove(execution),
    )
