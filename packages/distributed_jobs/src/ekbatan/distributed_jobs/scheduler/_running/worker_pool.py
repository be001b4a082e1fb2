"""A fixed pool of daemon worker threads with an unbounded FIFO queue.

Daemon threads, because an execution still running after the shutdown waits is abandoned on
purpose (its row stays picked and is revived elsewhere); it must not keep the process alive.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import cast

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.worker_pool")

_STOP = object()


class WorkerPool:
    def __init__(self, threads: int, name: str = "ekbatan-worker") -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.size = threads
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # queued or running
        self._accepting = True
        self._counter = itertools.count(1)
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i + 1}", daemon=True) for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    @property
    def in_queue_or_processing(self) -> int:
        return self._pending

    def submit(self, job: Callable[[], None], on_done: Callable[[], None] | None = None) -> bool:
        with self._lock:
            if not self._accepting:
                return False
            self._pending += 1
        self._queue.put((job, on_done))
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            # a string: the subscripted type would be built at run time, for every job
            job, on_done = cast("tuple[Callable[[], None], Callable[[], None] | None]", item)
            try:
                job()
            except BaseException:
                log.exception("unexpected error in worker job")
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.notify_all()
            if on_done is not None:
                try:
                    on_done()
                except Exception:
                    log.exception("unexpected error after worker job")

    def stop_accepting(self) -> None:
        with self._lock:
            self._accepting = False

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=max(0.0, timeout))

    def discard_queued(self) -> int:
        """Drop jobs not yet started; returns how many."""
        dropped = 0
        kept = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                kept.append(item)
                continue
            dropped += 1
        for item in kept:
            self._queue.put(item)
        if dropped:
            with self._lock:
                self._pending -= dropped
                if self._pending == 0:
                    self._idle.notify_all()
        return dropped

    def close(self) -> None:
        """Let each thread exit after its current job."""
        for _ in self._threads:
            self._queue.put(_STOP)
