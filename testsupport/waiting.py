"""Polling waits with a deadline: the test-side replacement for ``sleep``-and-hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(interval)
