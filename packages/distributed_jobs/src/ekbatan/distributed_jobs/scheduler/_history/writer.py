"""Writing history rows off the hot path: workers hand a row over and move on; one thread
inserts what gathered, a batch per transaction.

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

from ekbatan.distributed_jobs.scheduler._history.table import HistoryRow, HistoryTable
from ekbatan.distributed_jobs.scheduler._liveness.outage import FailureLog

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.history")

#: how long rows gather before a write (a busy scheduler fills a batch sooner)
FLUSH_INTERVAL = 0.2
BATCH = 500
MAX_QUEUED = 20_000


class HistoryWriter:
    def __init__(self, table: HistoryTable) -> None:
        self.table = table
        self._queue: deque[HistoryRow] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = FailureLog("writing execution history (the rows are dropped)", log, retried=False)
        #: rows given up: their batch failed, or the queue was full
        self.failed_rows = 0
        self.written_rows = 0

    def submit(self, row: HistoryRow) -> None:
        with self._lock:
            if len(self._queue) >= MAX_QUEUED:
                self.failed_rows += 1
                return
            self._queue.append(row)
            full = len(self._queue) >= BATCH
        if full:
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
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        while True:
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            if not batch:
                return
            try:
                self.table.insert(batch)
            except Exception as error:
                self.failed_rows += len(batch)
                self.failures.failed(error)
                return  # the next flush tries again with what comes next
            self.written_rows += len(batch)
            self.failures.succeeded()
