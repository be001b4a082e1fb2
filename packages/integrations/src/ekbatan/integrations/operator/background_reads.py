"""Readings that scan a big table, kept from getting slow as the table grows.

The overview's counts per task group every row of ``scheduled_tasks`` (and of the history's
last day): milliseconds on a small table, most of a second on MariaDB at a million rows, and
every open page refreshes them. A :class:`BackgroundRead` reads in the request while a read is
fast. Once one takes longer than ``fast``, the page is answered from the last reading, labelled
with its age, and a new one runs on a thread of its own — one at a time, and at most once per
``max(min_interval, spacing × its duration)``, so a count of 0.6 s runs at most every 6 s
whatever the number of open tabs: the database spends at most a tenth of one connection on it.

The first read of a source runs on its own thread too, and the request waits for it only
``first_wait``: a small table answers within it, exact; a big one's page says it is counting
(and refreshes itself) rather than keep the operator waiting a second or more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

__all__ = ["BackgroundRead", "Reading"]

log = logging.getLogger("ekbatan.integrations.operator")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")

#: a read taking longer than this is done in the background from then on (seconds)
FAST = 0.1
#: the least time between two background reads (seconds)
MIN_INTERVAL = 5.0
#: a background read waits this many times its own duration before the next
SPACING = 10.0
#: how long a request waits for the first read before its page says it is still counting
FIRST_WAIT = 0.15


@dataclass(frozen=True)
class Reading(Generic[T_co]):
    value: T_co
    #: when it was read (the wall clock, for the page)
    read_at: datetime
    #: how long the read took (seconds)
    took: float
    #: whether it came from an earlier read rather than this request's
    cached: bool
    #: the least time until the next background read (seconds); 0 while reads are fast
    interval: float


class BackgroundRead(Generic[S, T]):
    """``read(source)`` served as the module says; a new source (a runtime rebuilt after a
    fork, say) starts afresh."""

    def __init__(
        self,
        read: Callable[[S], T],
        *,
        fast: float | None = None,
        min_interval: float | None = None,
        spacing: float | None = None,
        first_wait: float | None = FIRST_WAIT,
    ) -> None:
        """``first_wait``: how long a request waits for the first read (None: until it ends)."""
        self._read = read
        self.fast = FAST if fast is None else fast
        self.min_interval = MIN_INTERVAL if min_interval is None else min_interval
        self.spacing = SPACING if spacing is None else spacing
        self.first_wait = first_wait
        #: set when no read is running (the first read's end is what a request waits for)
        self._idle = threading.Event()
        self._idle.set()
        self._first_error: BaseException | None = None
        #: the first reading, kept by its read and not yet shown: the request that began it (or
        #: the next) shows it as read now, whether or not it had to wait for it
        self._unshown = False
        self._lock = threading.Lock()
        self._source: S | None = None
        self._last: Reading[T] | None = None
        self._last_monotonic = 0.0
        self._reading = False
        #: background reads that failed (the last reading stays shown)
        self.failures = 0

    def _interval(self, took: float) -> float:
        return max(self.min_interval, self.spacing * took) if took > self.fast else 0.0

    def begin(self, source: S) -> None:
        """Start the first read of ``source`` if none has started (several readings of one
        page then count at once, and :meth:`get` waits for each no longer than for all)."""
        with self._lock:
            if source is self._source and (self._last is not None or self._reading):
                return
            self._source, self._last, self._reading, self._first_error = source, None, True, None
            self._idle.clear()
        threading.Thread(
            target=self._read_behind, args=(source,), daemon=True, name="ekbatan-ui-count"
        ).start()

    def get(self, source: S, until: float | None = None) -> Reading[T] | None:
        """The reading to show; None while the first read of ``source`` is still running past
        ``first_wait`` (or past ``until``, a ``time.monotonic()`` deadline, when given)."""
        with self._lock:
            if source is not self._source:
                self._source, self._last, self._reading, self._unshown = source, None, False, False
                self._idle.set()
            last = self._last
            if last is None:
                first = not self._reading
                if first:
                    self._reading, self._first_error = True, None
                    self._idle.clear()
        if last is None:
            return self._first(source, first, until)
        with self._lock:
            if self._unshown:
                self._unshown = False
                return last
            due = time.monotonic() - self._last_monotonic >= last.interval
            background = last.took > self.fast
            start = due and background and not self._reading
            if start:
                self._reading = True
                self._idle.clear()
        if not background:
            return self._read_now(source)  # fast reads stay exact and fresh
        if start:
            threading.Thread(
                target=self._read_behind, args=(source,), daemon=True, name="ekbatan-ui-count"
            ).start()
        return Reading(last.value, last.read_at, last.took, True, last.interval)

    def _first(self, source: S, start: bool, until: float | None) -> Reading[T] | None:
        if start:
            threading.Thread(
                target=self._read_behind, args=(source,), daemon=True, name="ekbatan-ui-count"
            ).start()
        wait = self.first_wait if until is None else max(0.0, until - time.monotonic())
        self._idle.wait(wait)
        with self._lock:
            last, error, reading = self._last, self._first_error, self._reading
            if last is None and error is not None and not reading:
                self._first_error = None  # said once; the next request reads again
        if last is not None:
            with self._lock:
                self._unshown = False
            return last
        if error is not None and not reading:
            raise error  # the first read failed: the page says so, as a read in it would
        return None

    def _measured(self, source: S) -> Reading[T]:
        read_at, began = datetime.now(UTC), time.monotonic()
        value = self._read(source)
        took = time.monotonic() - began
        return Reading(value, read_at, took, False, self._interval(took))

    def _keep(self, source: S, reading: Reading[T]) -> None:
        with self._lock:
            if source is self._source:
                self._unshown = self._last is None
                self._last, self._last_monotonic = reading, time.monotonic()

    def _read_now(self, source: S) -> Reading[T]:
        reading = self._measured(source)
        self._keep(source, reading)
        return reading

    def _read_behind(self, source: S) -> None:
        try:
            self._keep(source, self._measured(source))
        except Exception as error:
            self.failures += 1
            with self._lock:
                self._last_monotonic = time.monotonic()  # not again at once: after an interval
                if self._last is None:
                    self._first_error = error
            log.warning("reading the overview's counts failed (the last ones stay shown): %s", error)
        finally:
            with self._lock:
                self._reading = False
                self._idle.set()
