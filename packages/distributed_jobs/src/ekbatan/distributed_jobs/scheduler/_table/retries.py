"""Writes the database rolled back for reasons of concurrency, tried again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.repository")

T = TypeVar("T")

#: attempts for the engine's own writes that lose to a deadlock or a busy lock
WRITE_ATTEMPTS = 3


def is_transient(error: BaseException) -> bool:
    """A write the database rolled back for reasons of concurrency, safe to try again."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "sqlstate", None) in ("40P01", "40001"):  # PostgreSQL deadlock, serialization
        return True
    code = orig.args[0] if orig is not None and getattr(orig, "args", None) else None
    if code in (1213, 1205):  # MySQL/MariaDB deadlock, lock wait timeout
        return True
    return "database is locked" in str(orig)  # SQLite busy beyond busy_timeout


def with_retries(write: Callable[[], T]) -> T:
    """Run ``write``; when the database rolled it back for a deadlock, run it again (the
    rollback undid it entirely, so this cannot apply it twice)."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return write()
        except DBAPIError as exc:
            if attempt == WRITE_ATTEMPTS or not is_transient(exc):
                raise
            log.info("write rolled back by the database (%s); retrying", exc.orig)
            time.sleep(0.005 * attempt)
    raise AssertionError("unreachable")
