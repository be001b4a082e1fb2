"""``ekbatan tasks pause|resume|retry``: the operator's controls over what runs.

* ``pause NAME`` pauses a task name cluster-wide (every instance, those scheduled later too):
  workers leave its due executions in place until ``resume NAME``. ``pause NAME INSTANCE``
  takes one execution out of the schedule, due time kept, until ``resume NAME INSTANCE``.
* ``retry NAME [INSTANCE]`` sends dead executions (out of retries) back, due now or ``--at``.

Pauses are rows in the database: they hold across restarts and for every worker of the table,
seen within one polling interval (at once on PostgreSQL).
"""

from __future__ import annotations

from datetime import datetime

import click

from ekbatan.distributed_jobs.scheduler import Released, ScheduledExecutionsFilter, SchedulerClient
from ekbatan.integrations.cli.app import Invocation, ekbatan_command
from ekbatan.integrations.cli.tables import format_time
from ekbatan.integrations.cli.tasks_command import parse_time, scheduler_client, tasks

__all__ = ["pause_command", "resume_command", "retry_command"]


@ekbatan_command(tasks, "pause")
@click.argument("task")
@click.argument("instance", required=False)
@click.option("--reason", metavar="TEXT", help="Why, kept with the pause (who and when are kept anyway).")
@click.option("--by", metavar="NAME", help="Who pauses it (default: user@host).")
def pause_command(
    invocation: Invocation, task: str, instance: str | None, reason: str | None, by: str | None
) -> None:
    """Pause a task (every instance) or one execution, cluster-wide, until resumed."""
    client = scheduler_client(invocation, companions=True)
    if instance is None:
        changed = client.pause_task(task, reason=reason, by=by)
    else:
        changed = client.pause_execution((task, instance), reason=reason, by=by)
    what = task if instance is None else f"{task}/{instance}"
    if instance is None:
        text = (
            f"task {task} paused: workers leave its executions due until `ekbatan tasks resume {task}` "
            "(running ones finish; seen within one polling interval)"
            if changed
            else f"task {task} was paused already; its pause is unchanged"
        )
        if not _has_executions(client, task):
            # a misspelled name pauses nothing that exists: say so rather than look obeyed
            text += (
                f"\nnote: no execution of task {task} is scheduled or held now; the pause applies to those "
                f"scheduled later. Check the name with `ekbatan tasks list` (undo: ekbatan tasks resume {task})"
            )
    else:
        held = client.get_held_execution(task, instance)
        due = format_time(held.execution_time) if held is not None else "-"
        text = (
            f"{what} paused: taken out of the schedule with its due time {due} until "
            f"`ekbatan tasks resume {task} {instance}`"
            if changed
            else f"{what} was paused already"
        )
    invocation.emit({"task": task, "instance": instance, "action": "pause", "changed": changed}, text)


def _has_executions(client: SchedulerClient, task: str) -> bool:
    first = ScheduledExecutionsFilter.all().with_limit(1)
    return bool(
        client.get_scheduled_executions_for_task(task, filter=first)
        or client.get_held_executions(task_name=task, limit=1)
    )


@ekbatan_command(tasks, "resume")
@click.argument("task")
@click.argument("instance", required=False)
def resume_command(invocation: Invocation, task: str, instance: str | None) -> None:
    """Resume a paused task (and its executions paused one by one) or one paused execution."""
    client = scheduler_client(invocation, companions=True)
    released = client.resume_task(task) if instance is None else client.resume_execution((task, instance))
    parts = []
    if released.task_pause_lifted:
        parts.append(f"task {task} resumed")
    if released.executions:
        parts.append(
            f"{len(released.executions)} paused execution(s) back in the schedule with their due times"
        )
    invocation.emit(_released_data("resume", released), "; ".join(parts) + _left_note(released))


@ekbatan_command(tasks, "retry")
@click.argument("task")
@click.argument("instance", required=False)
@click.option("--at", "at", metavar="ISO-TIME", callback=parse_time, help="Due then instead of now.")
def retry_command(invocation: Invocation, task: str, instance: str | None, at: datetime | None) -> None:
    """Send dead executions back to the schedule: one, or every one of TASK (their retries start over)."""
    client = scheduler_client(invocation, companions=True)
    released = client.retry_dead(task, instance, when=at)
    when = "now" if at is None else format_time(at)
    text = f"{len(released.executions)} dead execution(s) of {task} back in the schedule, due {when}"
    invocation.emit(_released_data("retry", released), text + _left_note(released))


def _released_data(action: str, released: Released) -> dict[str, object]:
    return {
        "task": released.task_name,
        "action": action,
        "task_pause_lifted": released.task_pause_lifted,
        "executions": list(released.executions),
        "left_held": list(released.left_held),
    }


def _left_note(released: Released) -> str:
    if not released.left_held:
        return ""
    names = ", ".join(released.left_held[:10]) + (" …" if len(released.left_held) > 10 else "")
    return (
        f"; {len(released.left_held)} left held because an execution with the same key is scheduled "
        f"again ({names}): cancel one of the two (ekbatan tasks cancel {released.task_name} INSTANCE)"
    )
