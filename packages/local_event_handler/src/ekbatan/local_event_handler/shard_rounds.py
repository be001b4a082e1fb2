"""One round over every shard: each shard's batch on a thread of its own, all awaited.

A slow or failing shard never delays the others' work within the round; the round reports
the first failure only after every shard finished, so no shard's work is cut off halfway.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from ekbatan.core.persistence import TransactionManager

T = TypeVar("T")


class ShardRoundError(RuntimeError):
    """A shard's batch raised; the cause is chained, and ``shard`` says which shard."""

    def __init__(self, message: str, shard: object) -> None:
        super().__init__(message)
        self.shard = shard


class ShardRounds:
    def __init__(self, what: str, thread_name: str) -> None:
        self._what = what
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, managers: Sequence[TransactionManager], batch: Callable[[TransactionManager], int]) -> int:
        """Run ``batch`` once per shard; the total it returned. A single shard runs on the
        calling thread: a thread hop would only add latency."""
        if len(managers) == 1:
            return self._one(managers[0], batch)
        futures = [self._pool(len(managers)).submit(self._one, m, batch) for m in managers]
        concurrent.futures.wait(futures)
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            first = errors[0]
            for other in errors[1:]:
                first.add_note(f"another shard failed too: {other}")
            raise first
        return sum(f.result() for f in futures)

    def _one(self, manager: TransactionManager, batch: Callable[[TransactionManager], int]) -> int:
        try:
            return batch(manager)
        except Exception as error:
            raise ShardRoundError(
                f"{self._what} of shard {manager.shard} failed: {type(error).__name__}: {error}",
                manager.shard,
            ) from error

    def _pool(self, size: int) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=size, thread_name_prefix=self._thread_name
                )
            return self._threads

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True)
