"""The states an execution is listed by, and what each means in the scheduler's tables."""

from __future__ import annotations

import enum

__all__ = ["ExecutionState"]


class ExecutionState(enum.Enum):
    """Rows of ``scheduled_tasks`` are *scheduled* (waiting, no failure), *due* (waiting and
    due now), *running* (picked) or *failing* (waiting after one or more failed runs); rows of
    ``<table>_held`` are *paused* (one by one) or *dead* (out of retries)."""

    SCHEDULED = "scheduled"
    DUE = "due"
    RUNNING = "running"
    FAILING = "failing"
    PAUSED = "paused"
    DEAD = "dead"

    @property
    def held(self) -> bool:
        """Whether the executions of this state are in the held table, not ``scheduled_tasks``."""
        return self in (ExecutionState.PAUSED, ExecutionState.DEAD)
