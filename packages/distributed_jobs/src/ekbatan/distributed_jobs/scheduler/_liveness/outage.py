"""Living through a database that is down: failures logged once per interval with a count,
growing pauses between retries, and a one-line connectivity check for start-up.

A poller that fails every 50 ms for the 20 s a database restarts would otherwise write 400
tracebacks that all say the same thing; an operator needs to know that it started failing,
that it still fails (how often, with what) and when it recovered.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

#: while failures go on, one summary line per this many seconds
SUMMARY_INTERVAL = 60.0
#: a failing loop retries at its own interval, doubled per failure in a row up to this
#: (or up to its own interval, when that is longer)
MAX_BACKOFF = 10.0
#: seconds the start-up check gives the driver to connect (and log in)
CHECK_CONNECT_TIMEOUT = 5

# drivers whose connect() takes ``connect_timeout`` in seconds
_CONNECT_TIMEOUT_DRIVERS = {"psycopg", "psycopg2", "pymysql", "mysqldb", "mariadbconnector"}


def backoff(interval: float, failures: int, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait after ``failures`` failures in a row of a loop that runs every ``interval``."""
    if failures <= 0:
        return interval
    return float(min(interval * 2 ** min(failures - 1, 30), max(interval, cap)))


@dataclass(frozen=True)
class OutagePolicy:
    """How one scheduler lives through failures: a summary line per ``summary_interval``
    seconds while they go on, and retries backing off up to ``max_backoff`` seconds (see
    :meth:`SchedulerBuilder.failure_summary_interval` and :meth:`SchedulerBuilder.max_retry_backoff`)."""

    summary_interval: float = SUMMARY_INTERVAL
    max_backoff: float = MAX_BACKOFF

    def __post_init__(self) -> None:
        for name in ("summary_interval", "max_backoff"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r} seconds")

    def backoff(self, interval: float, failures: int) -> float:
        return backoff(interval, failures, self.max_backoff)


DEFAULT_OUTAGE_POLICY = OutagePolicy()


# scheme://user:password@host in a driver's message: the password is masked. (The engine stays
# independent of ekbatan.core, whose credentials module does this for settings and pools.)
_PASSWORD_IN_URL = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)[^\s/?#@]+(?=@)")


def mask_url_password(text: str) -> str:
    return _PASSWORD_IN_URL.sub(lambda match: match.group("head") + "***", text)


def describe(exc: BaseException) -> str:
    """``Type: first line of the message``, passwords masked: what a log line needs of a failure."""
    # SQLAlchemy's own text leads with details it added (which pool, which statement); the
    # driver's error says what went wrong
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {mask_url_password(' '.join(lines[:2])) if lines else '(no message)'}"


#: the drivers whose own exceptions (raised where no SQLAlchemy wraps them: the PostgreSQL
#: notification listener's connection) are database errors too
_DRIVER_MODULES = {"psycopg", "psycopg2", "pymysql", "MySQLdb", "mariadb", "sqlite3"}


#: SQLAlchemy's errors, and a socket failing on its way to the server; not every OSError (a
#: user's missing file is a bug)
_DATABASE_ERRORS = (
    sa.exc.DBAPIError,
    sa.exc.DisconnectionError,
    sa.exc.TimeoutError,
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    socket.herror,
)


def is_database_error(exc: BaseException) -> bool:
    # A database error explains itself in one line; anything else may be a bug and gets its
    # traceback once per streak.
    return isinstance(exc, _DATABASE_ERRORS) or type(exc).__module__.partition(".")[0] in _DRIVER_MODULES


class FailureLog:
    """Logs a streak of failures of one activity (``what``): the first at once, then one summary
    per ``interval`` seconds (default: the policy's ``summary_interval``) with the count, then
    the recovery. Thread-safe."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        policy: OutagePolicy = DEFAULT_OUTAGE_POLICY,
        *,
        retried: bool = True,
    ) -> None:
        self.what = what
        self.retried = retried
        self.log = logger
        self.policy = policy
        self.interval = policy.summary_interval if interval is None else interval
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._streak = 0
        self._unreported = 0
        self._reported_at = 0.0
        self._summaries = 0

    @property
    def failures_in_a_row(self) -> int:
        return self._streak

    @property
    def summaries(self) -> int:
        """How many 'still failing' summaries were decided on, over every streak. Counted under
        the lock, before the line is written: what a caller waits on to know that a summary
        happened (the line itself may not be written yet)."""
        return self._summaries

    @property
    def failing_for(self) -> float | None:
        """Seconds since the streak began, or None when the last attempt succeeded."""
        since = self._since
        return None if since is None else self.clock() - since

    def failed(self, exc: BaseException) -> int:
        """Record a failure; returns the number of failures in a row."""
        now = self.clock()
        with self._lock:
            self._streak += 1
            streak = self._streak
            if self._since is None:
                self._since = now
                self._reported_at = now
                self._unreported = 0
                first = True
            else:
                first = False
                self._unreported += 1
                if now - self._reported_at < self.interval:
                    return streak
                count, self._unreported = self._unreported, 0
                previous, self._reported_at = self._reported_at, now
                self._summaries += 1
                began = self._since
        if first:
            self.log.warning(
                "%s failed: %s; %ssummarizing further failures every %gs",
                self.what,
                describe(exc),
                "retrying, and " if self.retried else "",
                self.interval,
                exc_info=None if is_database_error(exc) else exc,
            )
        else:
            self.log.warning(
                "%s still failing: %d more failure(s) in the last %.0fs, %d in a row over %.0fs; last: %s",
                self.what,
                count,
                now - previous,
                streak,
                now - began,
                describe(exc),
            )
        return streak

    def succeeded(self) -> None:
        if self._since is None:
            return  # the common case: no lock, no clock
        with self._lock:
            since, streak = self._since, self._streak
            self._since, self._streak, self._unreported = None, 0, 0
        if since is not None:
            self.log.warning(
                "%s recovered after %d failure(s) over %.1fs", self.what, streak, self.clock() - since
            )


_checking = threading.local()


def _bounded_connect(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
    if getattr(_checking, "active", False) and dialect.driver in _CONNECT_TIMEOUT_DRIVERS:
        cparams.setdefault("connect_timeout", CHECK_CONNECT_TIMEOUT)


@contextmanager
def _bounded(engine: sa.Engine) -> Iterator[None]:
    if not event.contains(engine, "do_connect", _bounded_connect):
        event.listen(engine, "do_connect", _bounded_connect)
    _checking.active = True
    try:
        yield
    finally:
        _checking.active = False


def check_connection(engine: sa.Engine, statement: str | None = None) -> None:
    """Connect once through ``engine``'s own pool (its connect arguments, events and session
    setup all apply) and run ``statement`` if given; raises what the driver raised.

    The driver gets ``CHECK_CONNECT_TIMEOUT`` seconds to connect (psycopg, pymysql, mysqlclient,
    MariaDB Connector/Python, unless the URL or connect arguments set ``connect_timeout``):
    an unreachable host fails the check instead of hanging it.
    """
    with _bounded(engine), engine.connect() as connection:
        if statement is not None:
            connection.exec_driver_sql(statement)
