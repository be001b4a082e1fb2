"""Threads that each take the next number and do one unit of work with it, until enough are
taken: the writers of the pipeline benchmarks, ours and the peer's.

Standard library only, so that the peers' venv can import it too (``bench/outbox_peer_runner.py``
runs there as a script, with this folder on its path).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence

#: a thread gives up after this many failed units: the figures would mean nothing anyway
MAX_ERRORS = 20


def run_numbered(
    units: Sequence[Callable[[int], None]], count: int | None, keep_going: Callable[[], bool] = lambda: True
) -> tuple[int, float, list[str]]:
    """Run each of ``units`` on a thread of its own, each call with the next number from 0,
    until ``count`` numbers are taken (``None``: no limit) or ``keep_going()`` is false.
    Returns (units done, seconds, the first errors)."""
    numbers = itertools.count()
    lock = threading.Lock()
    done = [0]
    errors: list[str] = []

    def loop(unit: Callable[[int], None]) -> None:
        while keep_going():
            with lock:
                number = next(numbers)
            if count is not None and number >= count:
                return
            try:
                unit(number)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) > MAX_ERRORS:
                    return
                continue
            with lock:
                done[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(unit,)) for unit in units]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0], time.perf_counter() - t0, errors[:5]
