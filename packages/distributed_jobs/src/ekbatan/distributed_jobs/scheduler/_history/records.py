"""What execution history keeps and for how long."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from ekbatan.distributed_jobs.scheduler._table.held_rows import ErrorRecord


class RunResult(enum.StrEnum):
    """How one run ended, as the history records it."""

    #: the body returned
    SUCCEEDED = "succeeded"
    #: the body raised; the failure handler decided what next (retry, reschedule, remove)
    FAILED = "failed"
    #: the body raised and its retries had run out: the execution is kept dead
    DEAD = "dead"
    #: its worker stopped heartbeating mid-run; the run was abandoned and the execution run again
    REVIVED = "revived"
    #: its worker stopped heartbeating mid-run; the dead-execution handler dropped it
    ABANDONED = "abandoned"
    #: not a run: slots of a recurring execution that its misfire policy left unrun (how many,
    #: and which, in the message; the execution time is the first of them)
    MISSED = "missed"


@dataclass(frozen=True, slots=True)
class HistoryRetention:
    """How long finished runs are kept, per result, and at most how many per task name.

    The defaults keep a week of successes and a month of failures and dead runs, and at most
    100,000 runs of any one task (the newest), so that one hot task cannot crowd out the rest.
    """

    succeeded: timedelta = timedelta(days=7)
    failed: timedelta = timedelta(days=30)
    max_runs_per_task: int | None = 100_000
    #: how often the pruning task runs (one node of the cluster each time)
    prune_every: timedelta = timedelta(minutes=10)
    #: rows deleted per statement: bounded, so pruning never holds long locks
    batch_size: int = 1_000

    def __post_init__(self) -> None:
        for name in ("succeeded", "failed", "prune_every"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise ValueError(f"history retention {name} must be a positive timedelta, got {value!r}")
        if self.max_runs_per_task is not None and self.max_runs_per_task < 1:
            raise ValueError(
                f"max_runs_per_task must be at least 1 (or None for no cap), got {self.max_runs_per_task}"
            )
        if not 1 <= self.batch_size <= 50_000:
            raise ValueError(f"history prune batch_size must be between 1 and 50000, got {self.batch_size}")

    def keep_for(self, result: RunResult) -> timedelta:
        return self.succeeded if result is RunResult.SUCCEEDED else self.failed


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Execution history as a scheduler records it (``SchedulerBuilder.execution_history``)."""

    retention: HistoryRetention = HistoryRetention()
    #: keep each run's task data too (off: data may hold what the user did not ask to keep)
    keep_task_data: bool = False


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One finished run."""

    id: int
    task_name: str
    instance_id: str
    #: when the execution was due
    execution_time: datetime
    picked_by: str | None
    #: the fencing token the run held (the row's version while it ran)
    version: int | None
    started: datetime | None
    finished: datetime
    duration_ms: int | None
    result: RunResult
    #: 1 for a first run, 2 for the first retry, …
    attempt: int | None
    error: ErrorRecord
    raw_data: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def cursor(self) -> tuple[datetime, int]:
        """Pass as ``before=`` to read the page after this entry (newest first)."""
        return (self.finished, self.id)


@dataclass(frozen=True, slots=True)
class TaskHistorySummary:
    """A task's runs in the window read: how many, how many failed, durations, the last run,
    and how many of its slots were missed (recorded apart from its runs)."""

    task_name: str
    runs: int
    failures: int
    p50_ms: float | None
    p95_ms: float | None
    last_finished: datetime | None
    last_result: RunResult | None
    missed: int = 0
