"""Group commit of completed one-time executions.

The commit, not the SQL, bounds how many executions a database can finish per second. Finished
one-time executions are handed to one writer thread, which deletes whatever has accumulated in
a single statement and transaction — while it writes, the next batch gathers. Workers do not
wait for it (one wake-up per batch instead of one per execution); a caller that must know the
outcome (``ops.remove()`` in a custom completion handler) waits for its own row.

Every row stays guarded by the version it was claimed at: a batch deletes exactly the
``(task_name, task_instance, version)`` triples it was given, and each submitter learns whether
*its* row was deleted, so a stale instance still gets its ExecutionError.

Until its delete commits, a finished execution's row is still picked: :meth:`pending` lists
those rows, and the heartbeat thread keeps them alive, or a delete held up (a busy SQLite
file, a slow commit) longer than the dead window would see the row revived and run again
elsewhere although it had finished here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import expect_one_row

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.group_commit")

#: rows per DELETE statement; bounded so the statement's parameter count stays small
MAX_BATCH = 200

#: ``callback(error)``: None when the row was deleted, else why not (an ExecutionError when
#: another writer had changed it)
Outcome = Callable[[BaseException | None], None]


class CompletionBatcher:
    def __init__(self, repository: TaskRepository, max_batch: int = MAX_BATCH) -> None:
        self.repository = repository
        self.max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[tuple[Execution, Outcome]] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._busy = False
        self._writing: list[Execution] = []  # the batch being written

    def start(self) -> None:
        with self._cond:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="ekbatan-completions", daemon=True)
                self._thread.start()

    def submit(self, execution: Execution, outcome: Outcome) -> None:
        """Delete ``execution`` at its version soon; ``outcome`` is called once it is known
        (on the writer thread — keep it short). Without a started writer, at once, here."""
        with self._cond:
            if self._thread is not None and not self._stopping:
                self._queue.append((execution, outcome))
                if len(self._queue) == 1:
                    self._cond.notify()
                return
        self._write([(execution, outcome)])

    def remove(self, execution: Execution) -> None:
        """Delete ``execution`` at its version and wait for it; ExecutionError when stale."""
        done = threading.Lock()
        done.acquire()
        result: list[BaseException | None] = []

        def outcome(error: BaseException | None) -> None:
            result.append(error)
            done.release()

        self.submit(execution, outcome)
        done.acquire()
        if result[0] is not None:
            raise result[0]

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                self._busy = True
                self._writing = [execution for execution, _ in batch]
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._writing = []
                    self._cond.notify_all()

    def pending(self) -> list[Execution]:
        """The executions handed over whose delete has not committed yet (queued or being
        written): their rows are still picked, and must keep heartbeating."""
        with self._cond:
            return [*self._writing, *(execution for execution, _ in self._queue)]

    def _write(self, batch: list[tuple[Execution, Outcome]]) -> None:
        try:
            removed = self.repository.remove_many([execution for execution, _ in batch])
        except BaseException as exc:  # every submitter learns the batch failed
            for _, outcome in batch:
                _call(outcome, exc)
            return
        for execution, outcome in batch:
            error = None
            if (execution.task_name, execution.instance_id) not in removed:
                try:
                    expect_one_row(0, "remove", execution)
                except BaseException as exc:
                    error = exc
            _call(outcome, error)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued, then end the writer thread."""
        with self._cond:
            thread, self._stopping = self._thread, True
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            self._thread = None


def _call(outcome: Outcome, error: BaseException | None) -> None:
    try:
        outcome(error)
    except Exception:
        log.exception("a completion callback failed")
