"""The engine's metrics: a listener turning each run, poll and heartbeat into measurements.

Instrument names, units and attribute keys are a public contract (dashboards and alerts are
written against them; docs/observability.md lists them). Attributes name the task, never the
instance: one series per task whatever the number of executions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete
from ekbatan.distributed_jobs.scheduler._history.records import RunResult
from ekbatan.distributed_jobs.scheduler._observability import SchedulerEventType, SchedulerListener
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations, run_result
from ekbatan.distributed_jobs.scheduler._telemetry.counters import LocalCounter

#: seconds: an execution's duration and lag, a poll's duration (OpenTelemetry's default
#: buckets are made for milliseconds: they would put every run below one second in one bucket)
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class EngineMetrics(SchedulerListener):
    def __init__(self, meter: Any, *, semantic_conventions: bool = False) -> None:
        self.executions = LocalCounter(
            meter,
            "ekbatan.executions",
            "{execution}",
            "Finished runs, by task and result (succeeded, failed, dead, revived, abandoned)",
            ("task", "result"),
        )
        self.duration = _seconds(
            meter,
            "ekbatan.execution.duration",
            "How long a run took, from its start to its end, by task and result",
        )
        self.lag = _seconds(
            meter, "ekbatan.execution.lag", "How late a run started: its start minus its due time, by task"
        )
        self.poll_duration = _seconds(
            meter, "ekbatan.poll.duration", "How long one poll for due executions took"
        )
        self.poll_claimed = LocalCounter(
            meter,
            "ekbatan.poll.claimed",
            "{execution}",
            "Due executions found by polls (via=poll) and claimed from notifications (via=notification)",
            ("via",),
        )
        self.heartbeat_failures = LocalCounter(
            meter,
            "ekbatan.heartbeat.failures",
            "{heartbeat}",
            "Heartbeats of running executions that could not be written, by task",
            ("task",),
        )
        self.revived = LocalCounter(
            meter,
            "ekbatan.dead_executions.revived",
            "{execution}",
            "Executions found dead (their node stopped heartbeating) and handled, by task",
            ("task",),
        )
        self.process_duration = (
            _seconds(
                meter,
                "messaging.process.duration",
                "Duration of processing operation (OpenTelemetry messaging conventions)",
            )
            if semantic_conventions
            else None
        )
        # attribute dicts are made once per (task, result): measurements reuse them
        self._task_attrs: dict[str, dict[str, str]] = {}
        self._result_attrs: dict[tuple[str, str], dict[str, str]] = {}

    # ------------------------------------------------------------------ attributes
    def _task(self, task: str) -> dict[str, str]:
        attrs = self._task_attrs.get(task)
        if attrs is None:
            attrs = self._task_attrs[task] = {"task": task}
        return attrs

    def _result(self, task: str, result: RunResult) -> dict[str, str]:
        key = (task, result.value)
        attrs = self._result_attrs.get(key)
        if attrs is None:
            attrs = self._result_attrs[key] = {"task": task, "result": result.value}
        return attrs

    # ------------------------------------------------------------------ runs
    def on_execution_start(self, currently_executing: CurrentlyExecuting) -> None:
        execution = currently_executing.execution
        lag = (currently_executing.start_time - execution.execution_time).total_seconds()
        self.lag.record(max(lag, 0.0), self._task(execution.task_name))

    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        task = complete.execution.task_name
        result = run_result(complete)
        seconds = (complete.time_done - complete.time_started).total_seconds()
        self.executions.add((task, result.value))
        self.duration.record(seconds, self._result(task, result))
        if self.process_duration is not None:
            self.process_duration.record(
                seconds,
                {
                    "messaging.system": "ekbatan",
                    "messaging.operation.name": "process",
                    "messaging.destination.name": task,
                    **({} if result is RunResult.SUCCEEDED else {"error.type": result.value}),
                },
            )

    def dead_execution_handled(self, execution: Execution, ops: ExecutionOperations, now: datetime) -> None:
        """A run whose node stopped heartbeating, handled: revived (rescheduled) or abandoned."""
        revived = ops.outcome in ("rescheduled", "replaced")
        task = execution.task_name
        self.executions.add((task, (RunResult.REVIVED if revived else RunResult.ABANDONED).value))
        self.revived.add((task,))

    def on_execution_failed_heartbeat(self, currently_executing: CurrentlyExecuting) -> None:
        self.heartbeat_failures.add((currently_executing.execution.task_name,))

    # ------------------------------------------------------------------ polls
    def on_poll(self, seconds: float, claimed: int) -> None:
        self.poll_duration.record(seconds)
        if claimed:
            self.poll_claimed.add(("poll",), claimed)

    def on_scheduler_event(self, event: SchedulerEventType) -> None:
        if event is SchedulerEventType.RAN_CLAIM_NOTIFIED:
            self.poll_claimed.add(("notification",))


def _seconds(meter: Any, name: str, description: str) -> Any:
    return meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
    )
