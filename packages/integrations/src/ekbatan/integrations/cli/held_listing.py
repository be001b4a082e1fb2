"""How held executions (dead letters, executions paused one by one) and paused task names
print: ``tasks list --dead|--paused``, ``tasks show`` of a held execution, and the note under
``tasks list`` naming the paused tasks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler import ErrorRecord, HeldExecution, TaskPause
from ekbatan.integrations.cli.tables import TABLE_WIDTH, format_time, render_table
from ekbatan.integrations.task_views import data_preview, decode_json

ERROR_PREVIEW = 40


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def held_as_dict(held: HeldExecution, *, full: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "task": held.task_name,
        "instance": held.instance_id,
        "state": held.state.value,
        "execution_time": _iso(held.execution_time),
        "held_at": _iso(held.held_at),
        "held_by": held.held_by,
        "reason": held.reason,
        "consecutive_failures": held.consecutive_failures,
        "last_success": _iso(held.last_success),
        "last_failure": _iso(held.last_failure),
        "error_class": held.error.error_class,
        "error_message": held.error.message,
        "data_size": None if held.raw_data is None else len(held.raw_data),
        "data_preview": data_preview(held.raw_data),
    }
    if full:
        is_json, value = decode_json(held.raw_data)
        out["data"] = value if is_json else None
        out["error_traceback"] = held.error.traceback
    return out


def pause_as_dict(pause: TaskPause) -> dict[str, Any]:
    return {
        "task": pause.task_name,
        "paused_at": _iso(pause.paused_at),
        "paused_by": pause.paused_by,
        "reason": pause.reason,
    }


def error_preview(error: ErrorRecord, width: int = ERROR_PREVIEW) -> str | None:
    """``Class: message``, the class without its module, cut to ``width`` unless ``--wide``."""
    if error.error_class is None:
        return None
    text = f"{error.error_class.rpartition('.')[2]}: {error.message or ''}"
    width = width if TABLE_WIDTH.get() else len(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def held_listing(
    items: list[HeldExecution], pauses: list[TaskPause], more: bool, limit: int, what: str
) -> str:
    parts = []
    if pauses:
        parts.append(pauses_table(pauses))
    rows: list[tuple[object, ...]]
    if items and what == "dead":
        rows = [
            (h.task_name, h.instance_id, h.held_at, h.consecutive_failures, error_preview(h.error))
            for h in items
        ]
        parts.append(render_table(("TASK", "INSTANCE", "DEAD SINCE", "FAILURES", "ERROR"), rows))
    elif items:
        rows = [(h.task_name, h.instance_id, h.held_at, h.execution_time, h.held_by, h.reason) for h in items]
        parts.append(render_table(("TASK", "INSTANCE", "PAUSED SINCE", "DUE", "BY", "REASON"), rows))
    if items:
        parts.append(
            f"the first {limit} shown; more match (--limit)" if more else f"{len(items)} {what} execution(s)"
        )
    elif not pauses:
        parts.append(f"no {what} executions" + ("" if what == "dead" else " and no paused tasks"))
    return "\n".join(parts)


def pauses_table(pauses: list[TaskPause]) -> str:
    return render_table(
        ("PAUSED TASK", "SINCE", "BY", "REASON"),
        [(p.task_name, p.paused_at, p.paused_by, p.reason) for p in pauses],
    )


def paused_note(pauses: list[TaskPause], listed_tasks: set[str]) -> str:
    """Under ``tasks list``: which listed executions wait for a paused task's resumption."""
    shown = [p for p in pauses if p.task_name in listed_tasks]
    if not shown:
        return ""
    lines = [
        f"task {p.task_name} is paused since {format_time(p.paused_at)}"
        + (f" ({p.reason})" if p.reason else "")
        + f": its executions wait for `ekbatan tasks resume {p.task_name}`"
        for p in shown
    ]
    return "\n" + "\n".join(lines)


def held_details(held: HeldExecution) -> str:
    rows = [
        ("task", held.task_name),
        ("instance", held.instance_id),
        (
            "state",
            f"{held.state.value} (out of the schedule: tasks retry|resume sends it back, tasks cancel drops it)",
        ),
        ("due", held.execution_time),
        ("held since", held.held_at),
        ("held by", held.held_by),
        ("reason", held.reason),
        ("consecutive failures", held.consecutive_failures),
        ("last success", held.last_success),
        ("last failure", held.last_failure),
        (
            "error",
            None if held.error.error_class is None else f"{held.error.error_class}: {held.error.message}",
        ),
        ("data", data_preview(held.raw_data, 2000) if held.raw_data is not None else None),
    ]
    text = render_table(("FIELD", "VALUE"), rows, width=0)
    if held.error.traceback:
        text += "\n\n" + held.error.traceback.rstrip()
    return text
