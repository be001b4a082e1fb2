"""Group commit of completed one-time executions.

The commit, not the SQL, bounds how many executions a database can finish per second. A
worker that removes its finished execution while another worker is already writing joins the
next batch instead of committing alone; a lone worker writes at once, so an idle system pays no
extra latency. Every row stays guarded by the version it was claimed at — the batch deletes
exactly the ``(task_name, task_instance, version)`` triples it was given, and each worker
learns whether *its* row was deleted, so a stale instance still gets its ExecutionError.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ekbatan.distributed_jobs.scheduler.execution import Execution
from ekbatan.distributed_jobs.scheduler.repository import TaskRepository, expect_one_row

#: rows per DELETE statement; bounded so the statement's parameter count stays small
MAX_BATCH = 200


class _Pending:
    __slots__ = ("done", "error", "execution", "lead", "removed", "wake")

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.wake = threading.Event()  # set when flushed, or when handed the leadership
        self.done = False
        self.lead = False
        self.removed = False
        self.error: BaseException | None = None


class GroupCommitRemover:
    def __init__(self, repository: TaskRepository, max_batch: int = MAX_BATCH) -> None:
        self.repository = repository
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._flushing = False

    def remove(self, execution: Execution) -> None:
        """Delete ``execution`` at its version, together with whatever else is waiting."""
        mine = _Pending(execution)
        with self._lock:
            self._queue.append(mine)
            if self._flushing:
                leader = False
            else:
                self._flushing = leader = True
        if not leader:
            mine.wake.wait()
            leader = mine.lead
        if leader:
            self._lead(mine)
        if mine.error is not None:
            raise mine.error
        expect_one_row(1 if mine.removed else 0, "remove", execution)

    def _lead(self, mine: _Pending) -> None:
        # Flush until our own row is written, then hand the leadership to the first waiter:
        # a leader flushing for everyone who arrives meanwhile would, under steady load, never
        # return to its own execution (which stays "currently executing", its heartbeats
        # failing on the row it already deleted).
        while not mine.done:
            with self._lock:
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
            self._flush(batch)
        with self._lock:
            if self._queue:
                successor = self._queue[0]
                successor.lead = True
                successor.wake.set()
            else:
                self._flushing = False

    def _flush(self, batch: Sequence[_Pending]) -> None:
        try:
            removed = self.repository.remove_many([p.execution for p in batch])
        except BaseException as exc:  # every waiter learns the batch failed
            for p in batch:
                p.error = exc
                p.done = True
                p.wake.set()
            return
        for p in batch:
            p.removed = (p.execution.task_name, p.execution.instance_id) in removed
            p.done = True
            p.wake.set()
