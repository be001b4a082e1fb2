"""The operator's actions, each one call of the public :class:`SchedulerClient` API: pause and
resume a task name or one execution, retry a dead execution (now or at a time) or every dead
execution of a task, run a scheduled execution now or move it to a time, cancel one, drop a held
(dead or paused) one; and re-drive a handler's event notifications (:mod:`.redrive_action`).

Run now, reschedule, cancel and pausing one execution are guarded by the row's ``version`` seen on the
page: the row is read first and must still be at that version and not picked, else nothing is
changed (:class:`Conflict`). The client takes no version, so this check reads the row first;
the client's own write is itself versioned at the version the client then reads, so a change
after that read fails the write rather than being overwritten. Only a change between the two
reads (milliseconds) slips through. Dropping a held execution is guarded by the state the page
showed it in (the held row has no version): it deletes only a row still held in that state, and
never the execution of the same key in ``scheduled_tasks``.

Times are typed in UTC as ``YYYY-MM-DDTHH:MM[:SS]``, what a browser's ``datetime-local`` input
sends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ekbatan.distributed_jobs.scheduler import (
    ExecutionError,
    HoldError,
    HoldState,
    Released,
    SchedulerClient,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)
from ekbatan.integrations.operator.eventlog_shards import EventlogShards
from ekbatan.integrations.operator.redrive_action import RedriveRefused, redrive_everywhere, redrive_question
from ekbatan.integrations.operator.typed_times import TIME_FORMAT, parse_typed_time

__all__ = [
    "ACTIONS",
    "CANCEL",
    "PAUSE",
    "RETRY",
    "RUN",
    "VIEW",
    "Action",
    "ActionError",
    "CARRIED_FIELDS",
    "Conflict",
    "TIME_FORMAT",
    "ask",
    "parse_time",
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
        Action("retry-dead", RETRY, "Run dead execution {task}/{instance} again{when}?", execution=True),
        Action("retry-all-dead", RETRY, "Run all {count} dead execution(s) of task {task} again?", False),
        Action("run-now", RUN, "Run execution {task}/{instance} now?", True, versioned=True),
        Action("reschedule", RUN, "Move execution {task}/{instance} to run{when}?", True, versioned=True),
        Action("cancel", CANCEL, "Cancel execution {task}/{instance}?", True, versioned=True),
        Action("cancel-held", CANCEL, "Drop {state} execution {task}/{instance} for good?", execution=True),
        Action("redrive", RETRY, "", execution=False),
    )
}

#: the form fields a confirmation page carries on to the action
CARRIED_FIELDS = ("task", "instance", "version", "at", "state", "handler", "states")
#: how a time is typed (UTC), as a browser's ``datetime-local`` input sends it
#: the states a held execution can be dropped from, as the pages name them
_HELD_STATES = {state.value: state for state in HoldState}


class ActionError(Exception):
    """An action that cannot be done as asked (bad parameters): 400."""

    status = 400


class Conflict(ActionError):
    """The execution is not as the page showed it (changed, picked, gone, not paused): 409;
    nothing was changed."""

    status = 409


def ask(
    client: SchedulerClient, action: Action, params: Mapping[str, str], *, shards: EventlogShards | None
) -> str:
    """The question the confirmation page asks, after checking the form as :func:`perform`
    will (a bad time or state is refused before it is confirmed). Raises :class:`ActionError`."""
    if action.name == "redrive":
        return _on_shards(redrive_question, shards, params)
    task, instance = _target(action, params)
    context = {"task": task, "instance": instance, "when": "", "state": "", "count": 0}
    if action.name in ("retry-dead", "reschedule"):
        at = _time(action, params)
        context["when"] = "" if at is None else f" at {at:%Y-%m-%d %H:%M:%S} UTC"
    if action.name == "cancel-held":
        context["state"] = _held_state(params).value
    if action.name == "retry-all-dead":
        context["count"] = client.count_held().get((task, HoldState.DEAD), 0)
        if not context["count"]:
            raise Conflict(f"Nothing to retry: task {task} has no dead execution now.")
    return action.question.format(**context)


def perform(
    client: SchedulerClient,
    action: Action,
    params: Mapping[str, str],
    *,
    actor: str,
    reason: str | None,
    shards: EventlogShards | None = None,
) -> str:
    """Do ``action``; the message saying what was done. Raises :class:`ActionError`.
    ``shards``: the application's, for the actions on them (``redrive``)."""
    if action.name == "redrive":
        return _on_shards(redrive_everywhere, shards, params)
    task, instance = _target(action, params)
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
            at = _time(action, params)
            return _released(what, client.retry_dead(task, instance, when=at), due=at)
        if action.name == "retry-all-dead":
            return _released(f"Task {task}", client.retry_dead(task), dead=True)
        if action.name == "run-now":
            client.reschedule(key, client.clock.now())
            return f"{what} is due now (its failure count reset)."
        if action.name == "reschedule":
            at = _time(action, params)
            assert at is not None  # _time requires it for a reschedule
            client.reschedule(key, at)
            return f"{what} is due at {at:%Y-%m-%d %H:%M:%S} UTC (its failure count reset)."
        if action.name == "cancel":
            client.cancel(key)
            return f"{what} cancelled."
        if action.name == "cancel-held":
            state = _held_state(params)
            client.cancel_held(task, instance, state=state)
            return f"{state.value.capitalize()} execution {what} dropped for good."
    except (HoldError, ExecutionError, TaskInstanceNotFoundError, TaskInstanceCurrentlyExecutingError) as e:
        raise Conflict(f"Nothing changed: {e}") from None
    raise ActionError(f"unknown action {action.name}")  # pragma: no cover - ACTIONS is closed


def parse_time(text: str) -> datetime:
    """A time typed in UTC as ``YYYY-MM-DDTHH:MM[:SS]``. Raises :class:`ActionError` naming
    the value and the format."""
    try:
        return parse_typed_time(text)
    except ValueError as error:
        raise ActionError(str(error)) from None


def _on_shards(
    step: Callable[[EventlogShards | None, Mapping[str, str]], str],
    shards: EventlogShards | None,
    params: Mapping[str, str],
) -> str:
    """A step of an action on the application's shards; its refusal is a 400."""
    try:
        return step(shards, params)
    except RedriveRefused as refused:
        raise ActionError(str(refused)) from None


def _target(action: Action, params: Mapping[str, str]) -> tuple[str, str]:
    task = params.get("task", "")
    if not task:
        raise ActionError("no task name given")
    instance = params.get("instance", "")
    if action.execution and not instance:
        raise ActionError("no instance given")
    return task, instance


def _time(action: Action, params: Mapping[str, str]) -> datetime | None:
    """The ``at`` field: required to reschedule, optional to retry (absent: now)."""
    text = params.get("at", "").strip()
    if not text:
        if action.name == "reschedule":
            raise ActionError(f"No time given: write it in UTC as {TIME_FORMAT}, e.g. 2030-01-31T09:00.")
        return None
    return parse_time(text)


def _held_state(params: Mapping[str, str]) -> HoldState:
    state = _HELD_STATES.get(params.get("state", ""))
    if state is None:
        raise ActionError("no state of the held execution given: dead or paused")
    return state


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


def _released(what: str, released: Released, *, due: datetime | None = None, dead: bool = False) -> str:
    parts = []
    if released.task_pause_lifted:
        parts.append(f"{what} resumed")
    if released.executions:
        at = "" if due is None else f", due at {due:%Y-%m-%d %H:%M:%S} UTC"
        kind = "dead execution(s)" if dead else "execution(s)"
        parts.append(f"{len(released.executions)} {kind} back in the schedule{at}")
    if released.left_held:
        parts.append(
            f"{len(released.left_held)} left held: an execution with the same key is scheduled again"
        )
    return "; ".join(parts) + "." if parts else f"{what}: nothing changed."
