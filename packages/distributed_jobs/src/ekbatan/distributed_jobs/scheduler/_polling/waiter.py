"""The poll loop's sleep: interruptible, with no lost wake-ups, and with a deadline that a
newly known due time can pull earlier."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Sleeper(Protocol):
    """What the poll loop sleeps on between polls: a :class:`Waiter`, or a test's stand-in."""

    def wait(self, seconds: float) -> None: ...


class Waiter:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting = False
        self._woken = False
        self._skip_next = False
        self._deadline = 0.0
        self._hint: float | None = None  # an earlier deadline asked for while not waiting

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return at once if a wake-up arrived since the last wait."""
        with self._cond:
            if self._skip_next:
                self._skip_next = False
                return
            now = time.monotonic()
            deadline = now + seconds
            if self._hint is not None:
                deadline = min(deadline, self._hint)
                self._hint = None
            if deadline <= now:
                return
            self._deadline = deadline
            self._waiting = True
            self._woken = False
            try:
                while not self._woken:
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            finally:
                self._waiting = False
                self._woken = False

    def wake(self) -> bool:
        """End the current wait; False when nobody is waiting."""
        with self._cond:
            if not self._waiting:
                return False
            self._woken = True
            self._cond.notify_all()
            return True

    def wake_or_skip_next_wait(self) -> None:
        """End the current wait, or make the next one return at once."""
        with self._cond:
            if self._waiting:
                self._woken = True
                self._cond.notify_all()
            else:
                self._skip_next = True

    def wake_by(self, seconds_from_now: float) -> None:
        """Make the current wait — or the next one — end no later than ``seconds_from_now``."""
        with self._cond:
            deadline = time.monotonic() + max(0.0, seconds_from_now)
            if not self._waiting:
                self._hint = deadline if self._hint is None else min(self._hint, deadline)
                return
            if deadline < self._deadline:
                self._deadline = deadline
                self._cond.notify_all()
