"""Whether this process's Ekbatan is ready, for the frameworks' health endpoints (FastAPI's
``health_router``, Flask's ``Ekbatan.health_blueprint``) and for any probe of your own:
:func:`health_report` depends on no web framework."""

from __future__ import annotations

import threading
import time
import weakref
from datetime import timedelta
from typing import Any

from ekbatan.distributed_jobs.scheduler import HoldState, Scheduler, SchedulerClient, TaskSummary
from ekbatan.integrations.runtime import EkbatanRuntime

__all__ = ["FAILING_TASKS_CACHE", "health_report"]

#: how long a health report reuses the failing-task count it read (per runtime)
FAILING_TASKS_CACHE = timedelta(seconds=5)


class _TaskSummaryCache:
    """The per-task summary of ``scheduled_tasks`` read at most once per ``max_age``: a probe
    hammered by many callers reads the table once per interval, whatever the request rate. A
    failed read is kept as long, so a database in trouble is not hammered either. While one
    caller reads, the others answer with the value read before rather than queue behind a read
    that may wait a connect timeout during an outage; only the very first read is waited for."""

    def __init__(self) -> None:
        self._reading = threading.Lock()  # held by the one caller reading
        self._read_at: float | None = None
        # the summary and the dead executions' count (None without the held table), or the
        # type name of the error reading the summary
        self._value: _Counts | str = ([], None)

    def _fresh(self, max_age: float) -> bool:
        read_at = self._read_at
        return read_at is not None and time.monotonic() - read_at < max_age

    def get(self, runtime: EkbatanRuntime, max_age: float) -> _Counts | str:
        if self._fresh(max_age):
            return self._value
        if not self._reading.acquire(blocking=self._read_at is None):
            return self._value  # another caller is reading: the previous value meanwhile
        try:
            if not self._fresh(max_age):  # not read by the caller this one waited for
                try:
                    client = runtime.scheduler_client
                    self._value = (client.get_scheduled_executions_summary_by_task(), _dead_count(client))
                except Exception as error:
                    # the error's type only: its text may carry a URL or a statement
                    self._value = type(error).__name__
                self._read_at = time.monotonic()
            return self._value
        finally:
            self._reading.release()


#: what the cache reads: the per-task summary and how many executions are dead
_Counts = tuple[list[TaskSummary], int | None]


def _dead_count(client: SchedulerClient) -> int | None:
    try:
        held = client.count_held()
    except Exception:
        return None  # no held table yet (not migrated since it came): nothing to count
    return sum(count for (_task, state), count in held.items() if state is HoldState.DEAD)


#: one cache per live runtime, keyed by ``id`` (a runtime is not hashable); a runtime's entry
#: goes when the runtime is collected
_caches: dict[int, _TaskSummaryCache] = {}
_caches_lock = threading.Lock()


def _task_summary(runtime: EkbatanRuntime, max_age: timedelta) -> _Counts | str:
    with _caches_lock:
        cache = _caches.get(id(runtime))
        if cache is None:
            cache = _caches[id(runtime)] = _TaskSummaryCache()
            weakref.finalize(runtime, _caches.pop, id(runtime), None)
    return cache.get(runtime, max_age.total_seconds())


def _history_dropped(scheduler: Scheduler) -> int | None:
    """History rows this process gave up (their batch failed, or the queue was full); None
    without execution history."""
    history = scheduler.execution_history
    return None if history is None or history.writer is None else history.writer.failed_rows


def _unknown_tasks(scheduler: Scheduler, summary: list[TaskSummary] | None) -> list[dict[str, Any]]:
    """Task names in ``scheduled_tasks`` that no task of this scheduler has, with their row
    counts (from the summary when it was read, else the names the scheduler met in due rows)."""
    known = set(scheduler.task_names)
    if summary is not None:
        return [
            {"task_name": task.task_name, "executions": task.instance_count}
            for task in summary
            if task.task_name not in known
        ]
    return [{"task_name": name, "executions": None} for name in scheduler.unresolved_task_names]


def health_report(
    runtime: EkbatanRuntime | None,
    *,
    max_poll_age: timedelta | None = None,
    max_failing_tasks: int | None = None,
    count_failing_tasks: bool = True,
    failing_tasks_cache: timedelta = FAILING_TASKS_CACHE,
) -> tuple[bool, dict[str, Any]]:
    """``(ready, report)`` of this process's Ekbatan; blocking (it may query ``scheduled_tasks``).

    Ready means: the runtime is started and, when there are jobs, the scheduler is running and
    its last successful poll is at most ``max_poll_age`` old (default: three polling intervals
    and at least 10 s). Failing tasks (rows with consecutive failures, not picked) are counted
    and make it not ready only when ``max_failing_tasks`` is given and exceeded; the count is
    read at most once per ``failing_tasks_cache`` (default 5 s) per runtime, so it may be that
    old. The report holds no task data and no configuration.

    ``paused`` is this process's own polling pause (``Scheduler.pause()``); ``paused_tasks``
    the task names paused cluster-wide, as the scheduler last read them. ``dead_executions``
    counts the executions kept dead after their retries ran out (read with the failing
    count); like paused tasks, they never make it not ready: an operator's attention, not a
    broken process. ``history_rows_dropped`` counts the execution history rows this process
    could not write (None without history).

    ``unknown_tasks`` (present only when there are some) lists the task names in
    ``scheduled_tasks`` that no task of this scheduler has, each with its number of rows: a name
    misspelled when scheduling, or a task of another release or application. They never make it
    not ready: their rows wait for an instance that knows them.
    """
    if runtime is None or not runtime.started:
        return False, {"status": "unavailable", "reason": "ekbatan is not started", "scheduler": None}
    if runtime.job_registry is None:
        return True, {"status": "ok", "scheduler": None}  # no job: nothing polls, nothing to check
    scheduler = runtime.job_registry.scheduler
    running = scheduler.is_started and not scheduler.is_shutting_down
    last_poll = scheduler.last_successful_poll
    age = None if last_poll is None else max(0.0, (scheduler.clock.now() - last_poll).total_seconds())
    limit = (
        max_poll_age
        if max_poll_age is not None
        else max(3 * scheduler.polling_interval, timedelta(seconds=10))
    )
    report: dict[str, Any] = {
        "running": running,
        "paused": scheduler.is_paused,
        "last_successful_poll_age_seconds": None if age is None else round(age, 3),
        "max_poll_age_seconds": limit.total_seconds(),
        "executions_running": len(scheduler.get_currently_executing()),
        "failing_tasks": None,
        "dead_executions": None,
        "paused_tasks": sorted(scheduler.paused_task_names),
        "history_rows_dropped": _history_dropped(scheduler),
    }
    reasons = []
    if not running:
        reasons.append("the scheduler is not running")
    if age is None:
        reasons.append("the scheduler has not polled yet")
    elif age > limit.total_seconds():
        reasons.append("the scheduler's last successful poll is too old")
    summary: list[TaskSummary] | None = None
    if count_failing_tasks:
        read = _task_summary(runtime, failing_tasks_cache)
        if isinstance(read, str):
            reasons.append(f"scheduled_tasks could not be read ({read})")
        else:
            summary, report["dead_executions"] = read
            failing = sum(task.failing_count for task in summary)
            report["failing_tasks"] = failing
            if max_failing_tasks is not None and failing > max_failing_tasks:
                reasons.append(f"{failing} failing task(s), more than {max_failing_tasks}")
    unknown = _unknown_tasks(scheduler, summary)
    if unknown:
        report["unknown_tasks"] = unknown
    ready = not reasons
    result: dict[str, Any] = {"status": "ok" if ready else "unavailable"}
    if reasons:
        result["reason"] = "; ".join(reasons)
    result["scheduler"] = report
    return ready, result
