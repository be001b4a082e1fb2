"""What to do with an execution whose owner stopped heartbeating."""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from ekbatan.distributed_jobs.scheduler._execution import ExecutionComplete
from ekbatan.distributed_jobs.scheduler._tasks.operations import ExecutionOperations

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.dead_execution")


@runtime_checkable
class DeadExecutionHandler(Protocol):
    def dead_execution(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None: ...


class ReviveDeadExecution:
    """Make it due again now, counted as a failure (the default for every task kind)."""

    def dead_execution(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        log.warning(
            "reviving dead execution %s (last heartbeat %s, picked by %s)",
            complete.execution,
            complete.execution.last_heartbeat,
            complete.execution.picked_by,
        )
        ops.reschedule(complete, complete.time_done)

    def __repr__(self) -> str:
        return "ReviveDeadExecution()"


class CancelDeadExecution:
    """Delete it."""

    def dead_execution(self, complete: ExecutionComplete, ops: ExecutionOperations) -> None:
        log.warning(
            "cancelling dead execution %s (last heartbeat %s, picked by %s)",
            complete.execution,
            complete.execution.last_heartbeat,
            complete.execution.picked_by,
        )
        ops.remove()

    def __repr__(self) -> str:
        return "CancelDeadExecution()"
