"""Writing history rows off the hot path: workers hand a run over and move on; one thread
turns what gathered into rows and inserts them, a batch per transaction.

A run that succeeded (nearly every run) is handed over as a short tuple of its fields, and its
row is built on the writer's thread: the thread that hands it over is, for a one-time run, the
completions' writer, whose next delete every finished run waits on, so it does no more there
than pack the tuple and append it. Other results come as rows already built (how a run failed
is known only where it ran). The two are told apart by their length.

A history write never fails or repeats a run: a batch that cannot be written is dropped,
counted (``failed_rows``) and logged once per streak; a queue full because the database is slow
drops the newest rows the same way rather than hold a worker back. Rows still queued when the
process dies are lost (at most one flush interval's worth): history is a record for people,
not part of the scheduling protocol.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ekbatan.distributed_jobs.scheduler._history.table import COLUMNS, HistoryRow, HistoryTable
from ekbatan.distributed_jobs.scheduler._liveness.outage import FailureLog

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.history")

#: how long rows gather before a write (a busy scheduler fills a batch sooner)
FLUSH_INTERVAL = 0.2
BATCH = 500
MAX_QUEUED = 20_000
ROW_WIDTH = len(COLUMNS)

#: what a succeeded run is handed over as: a tuple of another length than a row's (the writer's
#: ``row_of`` makes it a row)
Run = TypeVar("Run", bound=tuple[Any, ...])


class HistoryWriter(Generic[Run]):
    def __init__(self, table: HistoryTable, row_of: Callable[[Run], HistoryRow]) -> None:
        self.table = table
        self._row_of = row_of
        # runs and rows wait together, told apart by type at the flush; deque's append and
        # popleft are atomic, so the submitters take no lock (the lock orders the flushers)
        self._queue: deque[HistoryRow | Run] = deque()
        self._lock = threading.Lock()
        self._counting = threading.Lock()  # not the flush's lock: a full queue holds no worker
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = FailureLog("writing execution history (the rows are dropped)", log, retried=False)
        #: rows given up: their batch failed, or the queue was full
        self.failed_rows = 0
        self.written_rows = 0

    def submit(self, item: HistoryRow | Run) -> None:
        """Queue a row, or a succeeded run whose row the writer builds."""
        queue = self._queue
        if len(queue) >= MAX_QUEUED:
            with self._counting:
                self.failed_rows += 1
            return
        queue.append(item)
        if len(queue) >= BATCH and not self._wake.is_set():
            self._wake.set()
        if self._thread is None:  # not started (driven by hand): write at once
            self.flush()

    def start(self) -> None:
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name="ekbatan-history", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop."""
        self._stopping.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.flush()

    def _run(self) -> None:
        while not self._stopping.is_set():
            full = self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            # woken by a full batch: write full batches only, and leave the few rows that came
            # meanwhile for the next one (a batch costs about as much as 100 of its rows, and a
            # busy scheduler would otherwise write a small one after each full one); the
            # interval passing writes everything
            self.flush(whole=not full or self._stopping.is_set())

    def flush(self, whole: bool = True) -> None:
        """Write what is queued (``whole=False``: only full batches)."""
        row_of = self._row_of
        least = 1 if whole else BATCH
        with self._lock:  # one flusher at a time: the queue is emptied in order, once
            while len(self._queue) >= least:
                queue = self._queue
                items = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
                try:  # a row that cannot be built is a failed write too, not the thread's end
                    batch = [item if len(item) == ROW_WIDTH else row_of(item) for item in items]  # type: ignore[arg-type]
                    self.table.insert(batch)
                except Exception as error:
                    with self._counting:
                        self.failed_rows += len(items)
                    self.failures.failed(error)
                    return  # the next flush tries again with what comes next
                self.written_rows += len(items)
                self.failures.succeeded()
