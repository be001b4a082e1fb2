"""The operator's actions, each one call of the public :class:`SchedulerClient` API: pause and
resume a task name or one execution, retry a dead execution, run a scheduled execution now
(rescheduled to now) and cancel one.

Run now, cancel and pausing one execution are guarded by the row's ``version`` seen on the
page: the row is read first and must still be at that version and not picked, else nothing is
changed (:class:`Conflict`). The client takes no version, so this check reads the row first;
the client's own write is itself versioned at the version the client then reads, so a change
after that read fails the write rather than being overwritten. Only a change between the two
reads (milliseconds) slips through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ekbatan.distributed_jobs.scheduler import (
    ExecutionError,
    HoldError,
    Released,
    SchedulerClient,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)

__all__ = [
    "ACTIONS",
    "CANCEL",
    "PAUSE",
    "RETRY",
    "RUN",
    "VIEW",
    "Action",
    "ActionError",
    "Conflict",
    "perform",
]

#: the kinds ``authorize(request, kind)`` is asked with: reading a page, and the actions'
VIEW, RUN, PAUSE, CANCEL, RETRY = "view", "run", "pause", "cancel", "retry"


@dataclass(frozen=True)
class Action:
    """One action: its name in ``/actions/<name>``, the kind it is authorized as, the question
    its confirmation asks, and whether it names one execution (and then carries its version)."""

    name: str
    kind: str
    question: str
    execution: bool
    versioned: bool = False


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("pause-task", PAUSE, "Pause task {task}?", execution=False),
        Action("resume-task", PAUSE, "Resume task {task}?", execution=False),
        Action("pause-execution", PAUSE, "Pause execution {task}/{instance}?", True, versioned=True),
        Action("resume-execution", PAUSE, "Resume execution {task}/{instance}?", execution=True),
        Action("retry-dead", RETRY, "Run dead execution {task}/{instance} again?", execution=True),
        Action("run-now", RUN, "Run execution {task}/{instance} now?", True, versioned=True),
        Action("cancel", CANCEL, "Cancel execution {task}/{instance}?", True, versioned=True),
    )
}


class ActionError(Exception):
    """An action that cannot be done as asked (bad parameters): 400."""

    status = 400


class Conflict(ActionError):
    """The execution is not as the page showed it (changed, picked, gone, not paused): 409;
    nothing was changed."""

    status = 409


def perform(
    client: SchedulerClient, action: Action, params: Mapping[str, str], *, actor: str, reason: str | None
) -> str:
    """Do ``action``; the message saying what was done. Raises :class:`ActionError`."""
    task = params.get("task", "")
    if not task:
        raise ActionError("no task name given")
    instance = params.get("instance", "")
    if action.execution and not instance:
        raise ActionError("no instance given")
    key = (task, instance)
    what = f"{task}/{instance}"
    try:
        if action.versioned:
            _guard(client, key, params.get("version", ""))
        if action.name == "pause-task":
            if client.pause_task(task, reason=reason, by=actor):
                return f"Task {task} paused: its executions stay due until it is resumed."
            return f"Task {task} was paused already; its pause is unchanged."
        if action.name == "resume-task":
            return _released(f"Task {task}", client.resume_task(task))
        if action.name == "pause-execution":
            client.pause_execution(key, reason=reason, by=actor)
            return f"{what} paused: out of the schedule, due time kept, until resumed."
        if action.name == "resume-execution":
            return _released(what, client.resume_execution(key))
        if action.name == "retry-dead":
            return _released(what, client.retry_dead(task, instance))
        if action.name == "run-now":
            client.reschedule(key, client.clock.now())
            return f"{what} is due now (its failure count reset)."
        if action.name == "cancel":
            client.cancel(key)
            return f"{what} cancelled."
    except (HoldError, ExecutionError, TaskInstanceNotFoundError, TaskInstanceCurrentlyExecutingError) as e:
        raise Conflict(f"Nothing changed: {e}") from None
    raise ActionError(f"unknown action {action.name}")  # pragma: no cover - ACTIONS is closed


def _guard(client: SchedulerClient, key: tuple[str, str], version: str) -> None:
    try:
        seen = int(version)
    except ValueError:
        raise ActionError("no version of the execution given") from None
    found = client.get_scheduled_execution(key)
    what = f"{key[0]}/{key[1]}"
    if found is None:
        raise Conflict(f"Nothing changed: {what} is no longer scheduled (it ran, was paused or cancelled).")
    if found.is_picked:
        raise Conflict(f"Nothing changed: {what} is running now (picked by {found.execution.picked_by}).")
    if found.execution.version != seen:
        raise Conflict(
            f"Nothing changed: {what} changed since the page was read "
            f"(version {found.execution.version}, the page showed {seen}). Reload and look again."
        )


def _released(what: str, released: Released) -> str:
    parts = []
    if released.task_pause_lifted:
        parts.append(f"{what} resumed")
    if released.executions:
        parts.append(f"{len(released.executions)} execution(s) back in the schedule")
    if released.left_held:
        parts.append(
            f"{len(released.left_held)} left held: an execution with the same key is scheduled again"
        )
    return "; ".join(parts) + "." if parts else f"{what}: nothing changed."
