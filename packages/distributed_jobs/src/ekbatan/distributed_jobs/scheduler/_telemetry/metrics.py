"""The engine's metrics: a listener turning each run, poll and heartbeat into measurements.

Instrument names, units and attribute keys are a public contract (dashboards and alerts are
written against them; docs/observability.md lists them). Attributes name the task, never the
instance: one series per task whatever the number of executions. Everything is recorded in the
process first (see :mod:`.instruments`), then reported to an OpenTelemetry meter and/or read by
a Prometheus collector.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._context import CurrentlyExecuting
from ekbatan.distributed_jobs.scheduler._execution import Execution, ExecutionComplete
from ekbatan.distributed_jobs.scheduler._history.records import RunResult
from ekbatan.distributed_jobs.scheduler._observability import SchedulerEventType, SchedulerListener
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations, run_result
from ekbatan.distributed_jobs.scheduler._telemetry.instruments import (
    Described,
    LocalCounter,
    LocalHistogram,
)

EXECUTIONS = Described(
    "ekbatan.executions",
    "{execution}",
    "Finished runs, by task and result (succeeded, failed, dead, revived, abandoned)",
    ("task", "result"),
)
DURATION = Described(
    "ekbatan.execution.duration", "s", "How long a run took, from its start to its end", ("task", "result")
)
LAG = Described(
    "ekbatan.execution.lag", "s", "How late a run started: its start minus its due time", ("task",)
)
POLL_DURATION = Described("ekbatan.poll.duration", "s", "How long one poll for due executions took", ())
POLL_CLAIMED = Described(
    "ekbatan.poll.claimed",
    "{execution}",
    "Due executions found by polls (via=poll) and claimed from notifications (via=notification)",
    ("via",),
)
HEARTBEAT_FAILURES = Described(
    "ekbatan.heartbeat.failures",
    "{heartbeat}",
    "Heartbeats of running executions that could not be written, by task",
    ("task",),
)
REVIVED = Described(
    "ekbatan.dead_executions.revived",
    "{execution}",
    "Executions found dead (their node stopped heartbeating) and handled, by task",
    ("task",),
)
PROCESS_DURATION = Described(
    "messaging.process.duration",
    "s",
    "Duration of processing operation (OpenTelemetry messaging conventions)",
    ("messaging.system", "messaging.destination.name", "error.type"),
)


class EngineMetrics(SchedulerListener):
    def __init__(self, *, semantic_conventions: bool = False) -> None:
        self.executions = LocalCounter(EXECUTIONS)
        self.duration = LocalHistogram(DURATION)
        self.lag = LocalHistogram(LAG)
        self.poll_duration = LocalHistogram(POLL_DURATION)
        self.poll_claimed = LocalCounter(POLL_CLAIMED)
        self.heartbeat_failures = LocalCounter(HEARTBEAT_FAILURES)
        self.revived = LocalCounter(REVIVED)
        self.process_duration = LocalHistogram(PROCESS_DURATION) if semantic_conventions else None

    @property
    def counters(self) -> tuple[LocalCounter, ...]:
        return (self.executions, self.poll_claimed, self.heartbeat_failures, self.revived)

    @property
    def histograms(self) -> tuple[LocalHistogram, ...]:
        kept = (self.duration, self.lag, self.poll_duration, self.process_duration)
        return tuple(h for h in kept if h is not None)

    def report_to(self, meter: Any) -> None:
        """Report everything to an OpenTelemetry ``meter`` as well (an SDK's)."""
        for counter in self.counters:
            counter.observe_with(meter)
        for histogram in self.histograms:
            histogram.record_with(meter)

    # ------------------------------------------------------------------ runs
    def on_execution_start(self, currently_executing: CurrentlyExecuting) -> None:
        execution = currently_executing.execution
        lag = (currently_executing.start_time - execution.execution_time).total_seconds()
        self.lag.record(max(lag, 0.0), (execution.task_name,))

    def on_execution_complete(self, complete: ExecutionComplete) -> None:
        task = complete.execution.task_name
        result = run_result(complete).value
        seconds = (complete.time_done - complete.time_started).total_seconds()
        self.executions.add((task, result))
        self.duration.record(seconds, (task, result))
        if self.process_duration is not None:
            error = "" if result == RunResult.SUCCEEDED.value else result
            self.process_duration.record(seconds, ("ekbatan", task, error))

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
        self.poll_duration.record(seconds, ())
        if claimed:
            self.poll_claimed.add(("poll",), claimed)

    def on_scheduler_event(self, event: SchedulerEventType) -> None:
        if event is SchedulerEventType.RAN_CLAIM_NOTIFIED:
            self.poll_claimed.add(("notification",))
