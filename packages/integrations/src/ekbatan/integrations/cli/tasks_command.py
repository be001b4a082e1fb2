"""``ekbatan tasks list|show|run-now|reschedule|cancel``: the operator's view of ``scheduled_tasks``
(``pause``, ``resume`` and ``retry`` are in :mod:`.controls_command`).

It reads and changes the table on the jobs pool (the default shard's ``jobs-config``, its
``primary-config`` when there is none, or the ``--url`` database) through the engine's
``SchedulerClient``; the listing logic is in :mod:`ekbatan.integrations.task_views`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import sqlalchemy as sa

from ekbatan.distributed_jobs import DEFAULT_HEARTBEAT_INTERVAL
from ekbatan.distributed_jobs.scheduler import (
    DEFAULT_MISSED_HEARTBEATS,
    HeldExecution,
    HoldState,
    SchedulerClient,
    TaskInstanceNotFoundError,
    TaskPause,
)
from ekbatan.integrations.cli.app import Invocation, ekbatan_command, main
from ekbatan.integrations.cli.held_listing import (
    held_as_dict,
    held_details,
    held_listing,
    pause_as_dict,
    paused_note,
)
from ekbatan.integrations.cli.tables import TABLE_WIDTH, format_age, format_time, render_table
from ekbatan.integrations.cli.targets import CliError
from ekbatan.integrations.task_views import (
    PIPELINE_JOBS,
    DeadWindow,
    TaskFilter,
    TaskPickedError,
    TaskView,
    cancel_task,
    decode_json,
    get_task,
    list_tasks,
    reschedule_task,
    run_task_now,
)

__all__ = ["run_list", "tasks"]

SHOW_DATA_CHARS = 2000
SHOW_HEX_BYTES = 64


@main.group()
def tasks() -> None:
    """Scheduled executions: list, show, run now, reschedule, cancel; pause, resume, retry.

    run-now, reschedule and cancel refuse an execution that is picked (running now) unless
    --force is given.
    """


def scheduler_client(invocation: Invocation, *, companions: bool = False) -> SchedulerClient:
    """A client on the jobs pool, after checking that it connects and has ``scheduled_tasks``
    (and, with ``companions``, the tables of held executions and task pauses)."""
    target = invocation.target()
    provider = invocation.open(target.jobs)
    with target.jobs.connect(provider) as connection:
        target.require_scheduled_tasks(connection, companions=companions)
    return SchedulerClient(provider.engine, dialect=str(provider.dialect))


@ekbatan_command(tasks, "list")
@click.option("--task", "task_name", metavar="NAME", help="Only this task's executions.")
@click.option("--failing", is_flag=True, help="Only executions whose last run failed.")
@click.option("--picked", is_flag=True, help="Only executions picked (running) now.")
@click.option("--due", is_flag=True, help="Only executions due now and not picked.")
@click.option("--dead", is_flag=True, help="Only dead executions (out of retries, kept with their error).")
@click.option("--paused", is_flag=True, help="Only paused tasks and executions paused one by one.")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(min=1, max=10_000),
    help="At most this many.",
)
def list_command(
    invocation: Invocation,
    task_name: str | None,
    failing: bool,
    picked: bool,
    due: bool,
    dead: bool,
    paused: bool,
    limit: int,
) -> None:
    """List scheduled executions, the earliest due first (--dead, --paused: the held ones)."""
    if picked and due:
        raise click.UsageError("--picked and --due exclude each other: a due execution is one not picked yet")
    if dead or paused:
        others = [flag for flag, on in (("--failing", failing), ("--picked", picked), ("--due", due)) if on]
        if (dead and paused) or others:
            given = ["--dead"] * dead + ["--paused"] * paused + others
            raise click.UsageError(
                f"{' and '.join(given)} exclude each other: dead and paused executions are out of the "
                "schedule, neither picked nor due; list one kind at a time"
            )
        run_held_list(invocation, HoldState.DEAD if dead else HoldState.PAUSED, task_name, limit)
        return
    run_list(invocation, TaskFilter(task_name, failing, picked, due), limit)


def run_list(invocation: Invocation, task_filter: TaskFilter, limit: int) -> None:
    """The listing itself, for any entry point that has an invocation (``flask ekbatan tasks``)."""
    client = scheduler_client(invocation)
    views, more = list_tasks(client, task_filter, limit=limit)
    pauses = _task_pauses(client)
    paused = {p.task_name for p in pauses}
    data = {
        "executions": [{**v.as_dict(), "paused": v.task_name in paused} for v in views],
        "truncated": more,
        "paused_tasks": [pause_as_dict(p) for p in pauses],
    }
    invocation.emit(
        data, lambda: _listing(views, more, limit) + paused_note(pauses, {v.task_name for v in views})
    )


def _task_pauses(client: SchedulerClient) -> list[TaskPause]:
    try:
        return client.paused_tasks()
    except sa.exc.DBAPIError:
        return []  # no pauses table yet (not migrated since it came): nothing is paused


def run_held_list(invocation: Invocation, state: HoldState, task_name: str | None, limit: int) -> None:
    client = scheduler_client(invocation, companions=True)
    held = client.get_held_executions(state=state, task_name=task_name, limit=limit + 1)
    more, held = len(held) > limit, held[:limit]
    pauses = []
    if state is HoldState.PAUSED:
        pauses = [p for p in client.paused_tasks() if task_name is None or p.task_name == task_name]
    data = {
        "executions": [held_as_dict(h) for h in held],
        "truncated": more,
        "paused_tasks": [pause_as_dict(p) for p in pauses],
    }
    invocation.emit(data, lambda: held_listing(held, pauses, more, limit, state.value))


def _has_data(view: TaskView) -> bool:
    """Whether the row holds data: a recurring job's row holds none, or JSON ``null``."""
    return view.raw_data is not None and decode_json(view.raw_data) != (True, None)


def _listing(views: list[TaskView], more: bool, limit: int) -> str:
    if not views:
        return "no scheduled executions match"
    if TABLE_WIDTH.get():
        # what fits 100 columns: who holds a row and how old its heartbeat is tell whether it
        # is running; the data preview goes on a line of its own under its row (it alone is up to
        # 50 characters); the last success and failure are in --wide and tasks show
        now = datetime.now(UTC)
        table = render_table(
            ("TASK", "INSTANCE", "DUE", "PICKED BY", "HEARTBEAT", "FAILURES"),
            [
                (v.task_name, v.instance_id, v.execution_time, (v.picked_by or "yes") if v.picked else None,
                 None if v.last_heartbeat is None else f"{format_age((now - v.last_heartbeat).total_seconds())} ago",
                 v.consecutive_failures)
                for v in views
            ],
        )  # fmt: skip
        # one line per row: the last column (a count) never wraps
        header, *lines = table.splitlines()
        table = "\n".join(
            [header]
            + [
                text
                for line, view in zip(lines, views, strict=True)
                for text in (line, f"  data {view.preview()}" if _has_data(view) else None)
                if text is not None
            ]
        )
    else:
        table = render_table(
            ("TASK", "INSTANCE", "DUE", "PICKED", "PICKED BY", "HEARTBEAT", "LAST SUCCESS", "LAST FAILURE",
             "FAILURES", "DATA"),
            [
                (v.task_name, v.instance_id, v.execution_time, v.picked, v.picked_by, v.last_heartbeat,
                 v.last_success, v.last_failure, v.consecutive_failures, v.preview() if _has_data(v) else None)
                for v in views
            ],
        )  # fmt: skip
    tail = f"the first {limit} shown; more match (--limit)" if more else f"{len(views)} execution(s)"
    return f"{table}\n{tail}"


@ekbatan_command(tasks, "show")
@click.argument("task")
@click.argument("instance")
def show_command(invocation: Invocation, task: str, instance: str) -> None:
    """Everything about one execution, its data included (a dead one: its error and traceback)."""
    client = scheduler_client(invocation)
    try:
        view = get_task(client, task, instance)
    except TaskInstanceNotFoundError:
        held = _held(client, task, instance)
        if held is None:
            raise
        invocation.emit(held_as_dict(held, full=True), lambda: held_details(held))
        return
    paused = next((p for p in _task_pauses(client) if p.task_name == task), None)
    data = {**view.as_dict(full_data=True), "paused": paused is not None}
    invocation.emit(data, lambda: _details(view, paused))


def _held(client: SchedulerClient, task: str, instance: str) -> HeldExecution | None:
    try:
        return client.get_held_execution(task, instance)
    except sa.exc.DBAPIError:
        return None  # no held table yet: nothing is held


def _details(view: TaskView, paused: TaskPause | None = None) -> str:
    rows = [
        (
            "task",
            view.task_name + ("" if paused is None else f" (paused since {format_time(paused.paused_at)})"),
        ),
        ("instance", view.instance_id),
        ("due", view.execution_time),
        ("picked", view.picked),
        ("picked by", view.picked_by),
        ("last heartbeat", view.last_heartbeat),
        ("last success", view.last_success),
        ("last failure", view.last_failure),
        ("consecutive failures", view.consecutive_failures),
        ("version", view.version),
        ("priority", view.priority),
        ("data", _full_data(view.raw_data)),
    ]
    return render_table(("FIELD", "VALUE"), rows, width=0)  # one execution: its data whole


def _full_data(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    is_json, value = decode_json(raw)
    if is_json:
        text = json.dumps(value, ensure_ascii=False)
        text = text if len(text) <= SHOW_DATA_CHARS else text[: SHOW_DATA_CHARS - 1] + "…"
        return f"{text} (JSON, {len(raw)} bytes)"
    more = "…" if len(raw) > SHOW_HEX_BYTES else ""
    return f"hex:{raw[:SHOW_HEX_BYTES].hex()}{more} ({len(raw)} bytes, not JSON: not decoded)"


def parse_time(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 time; write e.g. 2030-01-01T09:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} has no time zone; add one, e.g. {value}Z for UTC or {value}+02:00"
        )
    return parsed.astimezone(UTC)


def _force_option(fn: Any) -> Any:
    return click.option(
        "--force",
        is_flag=True,
        help="Change it even when it is picked (running now); its result is then lost.",
    )(fn)


def _changed(
    invocation: Invocation, action: str, before: TaskView, after: datetime | None, said: str, note: str = ""
) -> None:
    data = {
        "task": before.task_name,
        "instance": before.instance_id,
        "action": action,
        "execution_time": None if after is None else after.isoformat(),
        "forced": before.picked,
        "previous": before.as_dict(),
    }
    forced = f" (forced: it was picked by {before.picked_by or 'a scheduler'})" if before.picked else ""
    text = f"{before.task_name}/{before.instance_id}: {said} (was due {format_time(before.execution_time)}){forced}{note}"
    invocation.emit(data, text)


@ekbatan_command(tasks, "run-now")
@click.argument("task")
@click.argument("instance")
@_force_option
def run_now_command(invocation: Invocation, task: str, instance: str, force: bool) -> None:
    """Make an execution due now (a dead one: send it back, due now); a worker runs it at its next poll."""
    client = scheduler_client(invocation)
    with _explained(invocation):
        try:
            before = run_task_now(client, task, instance, force=force)
        except TaskInstanceNotFoundError:
            held = _held(client, task, instance)
            if held is None or held.state is not HoldState.DEAD:
                raise
            client.retry_dead(task, instance)
            data = {"task": task, "instance": instance, "action": "retry", "previous": held_as_dict(held)}
            invocation.emit(
                data,
                f"{task}/{instance}: dead since {format_time(held.held_at)}, back in the schedule, due now",
            )
            return
    after = get_task(client, task, instance).execution_time
    note = ""
    if task in PIPELINE_JOBS:
        note = (
            "; a worker picks it at its next poll and keeps running it, as the event pipeline's jobs do "
            "(they do not finish: they run rounds for as long as a worker holds them, then recur)"
        )
    _changed(invocation, "run-now", before, after, f"due now, at {format_time(after)}", note)


@ekbatan_command(tasks, "reschedule")
@click.argument("task")
@click.argument("instance")
@click.option("--at", "at", required=True, metavar="ISO-TIME", callback=parse_time, help="The new due time.")
@_force_option
def reschedule_command(invocation: Invocation, task: str, instance: str, at: datetime, force: bool) -> None:
    """Move an execution to another time (its failure count starts again from 0)."""
    with _explained(invocation):
        before = reschedule_task(scheduler_client(invocation), task, instance, at, force=force)
    _changed(invocation, "reschedule", before, at, f"due {format_time(at)}")


@ekbatan_command(tasks, "cancel")
@click.argument("task")
@click.argument("instance")
@_force_option
def cancel_command(invocation: Invocation, task: str, instance: str, force: bool) -> None:
    """Delete an execution, or drop a dead or paused one. A recurring job's row comes back when a worker starts."""
    client = scheduler_client(invocation)
    with _explained(invocation):
        try:
            before = cancel_task(client, task, instance, force=force)
        except TaskInstanceNotFoundError:
            held = _held(client, task, instance)
            if held is None:
                raise
            client.cancel((task, instance))
            data = {"task": task, "instance": instance, "action": "cancel", "previous": held_as_dict(held)}
            invocation.emit(
                data, f"{task}/{instance}: {held.state.value} since {format_time(held.held_at)}, dropped"
            )
            return
    _changed(invocation, "cancel", before, None, "cancelled")


def dead_window(invocation: Invocation) -> DeadWindow:
    """The dead window the workers use: from the configuration, else the defaults."""
    settings = invocation.target().settings
    jobs = settings.jobs if settings is not None else None
    return DeadWindow(
        (jobs.heartbeat_interval if jobs else None) or DEFAULT_HEARTBEAT_INTERVAL,
        (jobs.missed_heartbeats_limit if jobs else None) or DEFAULT_MISSED_HEARTBEATS,
        configured=settings is not None,
    )


@contextmanager
def _explained(invocation: Invocation) -> Iterator[None]:
    """A refusal says who holds the row, how old its heartbeat is and what happens next."""
    try:
        yield
    except TaskPickedError as error:
        now, window = datetime.now(UTC), dead_window(invocation)
        raise CliError(error.explain(now, window) + _revival(error.view, now, window)) from error


def _revival(view: TaskView, now: datetime, window: DeadWindow) -> str:
    """For an event pipeline job within the dead window, what an ordinary row's refusal says
    too: when another worker takes it over if the one holding it is gone (e.g. SIGKILLed)."""
    if view.task_name not in PIPELINE_JOBS or view.last_heartbeat is None:
        return ""
    age = max(now - view.last_heartbeat, timedelta(0))
    if age > window.length:
        return ""  # the refusal already says that its worker looks gone
    revive = (window.length - age).total_seconds()
    return (
        f"; its last heartbeat is within {window.describe()}: if its worker is gone, another worker "
        f"revives it in about {revive:.0f}s, once the heartbeat is older than the dead window"
    )
