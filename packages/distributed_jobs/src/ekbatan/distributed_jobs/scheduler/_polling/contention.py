"""Spreading fetch-mode claims when several instances race for the same due rows.

In fetch mode every instance reads the *oldest* due rows and claims them one by one with an
optimistic ``UPDATE … WHERE version = ?``. With one instance every claim succeeds. With k
instances each reads the same head of the table and tries every row of it, so about
(k − 1) of every k claims fail: each failure is a wasted database transaction, and the
instances run slower together than one alone (db-scheduler reports the same: fetch costs
4–5 transactions per execution with 4 instances).

This module keeps the fetch protocol (claim each row just before it runs, guarded by
``version``) and only changes *which* rows an instance tries: once its claims start losing,
it reads a wider window of the oldest due rows (``spread × upper``) and tries a random sample
of ``upper`` of them, kept in their due order. Instances that sample independently collide
rarely. The window widens while claims keep losing and narrows again when they stop, so a
lone instance (which loses a claim only to a cancel, a reschedule or a race with its own next
poll) keeps the plain window.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

#: widest window, as a multiple of the fetch limit: 8 × the default 3 × threads rows
MAX_SPREAD = 8

#: fewer claims than this since the last poll say nothing about contention
MIN_ATTEMPTS = 4

#: lost share of claims above which the window widens, and below which it narrows
WIDEN_ABOVE = 0.25
NARROW_BELOW = 0.05


class ClaimContention:
    """Counts won and lost fetch-mode claims and sizes the next fetch window from them."""

    __slots__ = ("_attempts", "_lock", "_lost", "_random", "enabled", "spread")

    def __init__(self, *, enabled: bool = True, rng: random.Random | None = None) -> None:
        self._lock = threading.Lock()
        self._attempts = 0
        self._lost = 0
        self._random = rng or random.Random()
        self.enabled = enabled
        self.spread = 1

    def record(self, *, won: bool) -> None:
        with self._lock:
            self._attempts += 1
            if not won:
                self._lost += 1

    def window(self, upper: int) -> int:
        """Rows to read for the next poll; updates the spread from the claims since the last one."""
        if not self.enabled:
            return upper
        with self._lock:
            attempts, lost = self._attempts, self._lost
            if attempts >= MIN_ATTEMPTS:
                self._attempts = self._lost = 0
        if attempts >= MIN_ATTEMPTS:
            share = lost / attempts
            if share > WIDEN_ABOVE:
                self.spread = min(self.spread * 2, MAX_SPREAD)
            elif share < NARROW_BELOW:
                self.spread = max(self.spread // 2, 1)
        return upper * self.spread

    def choose(self, rows: Sequence[T], upper: int) -> list[T]:
        """``upper`` of ``rows`` at random, in their original (due) order; all of them if fewer."""
        if len(rows) <= upper:
            return list(rows)
        keep = sorted(self._random.sample(range(len(rows)), upper))
        return [rows[i] for i in keep]
