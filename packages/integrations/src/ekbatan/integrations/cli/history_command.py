"""``ekbatan tasks history [NAME [INSTANCE]]``: what ran, how it ended and how long it took.

Without a name, one line per task over the last ``--since`` (default one day): runs, failures,
p50/p95 duration and the last run; with ``--failed``, every task's runs that did not succeed,
newest first. With a name, its runs newest first (``--failed``: those that did not succeed),
read from ``scheduled_tasks_history`` (written by the workers when execution
history is on, as it is by default through the integrations).
"""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import click

from ekbatan.distributed_jobs.scheduler import HistoryEntry, TaskHistorySummary
from ekbatan.integrations.cli.app import Invocation, ekbatan_command
from ekbatan.integrations.cli.held_listing import error_preview
from ekbatan.integrations.cli.tables import format_time, render_table
from ekbatan.integrations.cli.tasks_command import scheduler_client, tasks

__all__ = ["history_command"]

ERROR_PREVIEW = 30


def _iso(value: Any) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _hours(text: str) -> timedelta:
    try:
        hours = float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number of hours; write e.g. 24 or 0.5") from None
    if hours <= 0:
        raise click.BadParameter(f"{text!r} is not positive; write e.g. 24 (the last day)")
    return timedelta(hours=hours)


@ekbatan_command(tasks, "history")
@click.argument("task", required=False)
@click.argument("instance", required=False)
@click.option("--failed", is_flag=True, help="Only runs that did not succeed.")
@click.option("--since-hours", "since", default="24", show_default=True, help="How far back.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(min=1, max=10_000),
    help="At most this many runs.",
)
def history_command(
    invocation: Invocation, task: str | None, instance: str | None, failed: bool, since: str, limit: int
) -> None:
    """Finished runs: a summary per task, or one task's runs newest first."""
    window = _hours(since)
    client = scheduler_client(invocation, companions=True)
    start = client.clock.now() - window
    if task is None and not failed:
        summary = client.history_summary(since=start)
        invocation.emit(
            {"since": _iso(start), "tasks": [_summary_dict(s) for s in summary]},
            lambda: _summary_table(summary, window),
        )
        return
    runs = client.history(task, instance, since=start, failed=failed, limit=limit + 1)
    more, runs = len(runs) > limit, runs[:limit]
    data = {"since": _iso(start), "runs": [_run_dict(r) for r in runs], "truncated": more}
    invocation.emit(data, lambda: _runs_table(runs, more, limit, task))


def _summary_dict(s: TaskHistorySummary) -> dict[str, Any]:
    return {
        "task": s.task_name,
        "runs": s.runs,
        "failures": s.failures,
        "p50_ms": s.p50_ms,
        "p95_ms": s.p95_ms,
        "last_finished": _iso(s.last_finished),
        "last_result": None if s.last_result is None else s.last_result.value,
        "missed_slots": s.missed,
    }


def _run_dict(r: HistoryEntry) -> dict[str, Any]:
    return {
        "task": r.task_name,
        "instance": r.instance_id,
        "result": r.result.value,
        "execution_time": _iso(r.execution_time),
        "started": _iso(r.started),
        "finished": _iso(r.finished),
        "duration_ms": r.duration_ms,
        "attempt": r.attempt,
        "picked_by": r.picked_by,
        "version": r.version,
        "error_class": r.error.error_class,
        "error_message": r.error.message,
    }


def _ms(value: float | None) -> str | None:
    if value is None:
        return None
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _summary_table(summary: list[TaskHistorySummary], window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    if not summary:
        return f"no runs recorded in the last {hours:g} h"
    table = render_table(
        ("TASK", "RUNS", "FAILURES", "MISSED", "P50", "P95", "LAST RUN", "LAST RESULT"),
        [
            (s.task_name, s.runs, s.failures, s.missed, _ms(s.p50_ms), _ms(s.p95_ms),
             format_time(s.last_finished), None if s.last_result is None else s.last_result.value)
            for s in summary
        ],
    )  # fmt: skip
    return f"{table}\n{len(summary)} task(s), runs of the last {hours:g} h"


def _runs_table(runs: list[HistoryEntry], more: bool, limit: int, task: str | None) -> str:
    if not runs:
        return f"no {'failed runs' if task is None else f'runs of {task}'} recorded in that window"
    header: tuple[str, ...] = ("FINISHED", "INSTANCE", "RESULT", "ATTEMPT", "TOOK", "BY", "ERROR")
    rows: list[tuple[Any, ...]] = [(format_time(r.finished), r.instance_id, r.result.value, r.attempt, _ms(r.duration_ms), r.picked_by,
             error_preview(r.error, ERROR_PREVIEW)) for r in runs]  # fmt: skip
    if task is None:  # the failed runs of every task: which task each was
        header, rows = ("TASK", *header), [(r.task_name, *row) for r, row in zip(runs, rows, strict=True)]
    table = render_table(header, rows)
    tail = f"the newest {limit} shown; more match (--limit)" if more else f"{len(runs)} run(s)"
    return f"{table}\n{tail}"
