"""Wake-ups across processes on PostgreSQL: ``LISTEN/NOTIFY`` as a hint, never as the truth.

Whoever schedules through this engine on PostgreSQL sends ``pg_notify(channel, payload)``
inside the scheduling transaction — delivered at commit, dropped on rollback. The payload is
the due time in epoch microseconds and, when one new execution was inserted, its task name and
instance: ``<µs>`` or ``<µs>:<length of the task name in characters>:<task name><instance>``.
Each scheduler keeps one dedicated connection listening and, on a notification, either claims
the named execution straight away (``notified_claims.py``) or pulls its poller's next wake-up
forward to the due time. Missed notifications (a reconnect, a pooler that does not pass them
through) cost only latency: polling still finds every due row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    DEFAULT_OUTAGE_POLICY,
    FailureLog,
    OutagePolicy,
)

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.wakeups")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: PostgreSQL refuses a payload of 8000 bytes or more; a longer name falls back to the time alone
MAX_PAYLOAD_BYTES = 7999

#: libpq keepalive settings of the listening connection, where the URL gives none
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
#: the longest a statement on the listening connection may run
STATEMENT_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class Wakeup:
    """What one notification says: something is due at ``due``; ``key`` names the one new
    execution when the payload carried it (None for batches, reschedules and long names)."""

    due: datetime
    key: TaskInstanceId | None = None
    #: a task was paused or resumed: read the pauses again before the next claim
    pauses_changed: bool = False


def channel_for(table_name: str) -> str:
    """SQL computing the channel name for ``table_name`` on the server.

    The schema is part of it — the table's own when qualified, else the session's
    ``current_schema()`` — so schedulers of same-named tables in different schemas of one
    database do not wake each other. ``table_name`` is a validated identifier.
    """
    schema, _, table = table_name.rpartition(".")
    if schema:
        return f"'{f'ekbatan_{schema}_{table}'[:63]}'"
    return f"left('ekbatan_' || current_schema() || '_{table}', 63)"


def encode_due(instant: datetime) -> str:
    # Whole microseconds, exact: a due time rounded down (to milliseconds, say) would wake the
    # poller just before the row is due, costing an empty poll and a second wake-up.
    return str((instant - _EPOCH) // _MICROSECOND)


def encode_scheduled(instant: datetime, task_name: str, instance_id: str) -> str:
    """The payload announcing one newly inserted execution: its due time and its key."""
    # The name's length, not a separator, splits name from instance: either may hold any character.
    payload = f"{encode_due(instant)}:{len(task_name)}:{task_name}{instance_id}"
    return payload if len(payload.encode()) <= MAX_PAYLOAD_BYTES else encode_due(instant)


#: the tail of a payload saying that the task pauses changed (an engine that predates it reads
#: the due time alone, a sound hint, and ignores the rest)
_PAUSES_CHANGED = "pauses"


def encode_pauses_changed(instant: datetime) -> str:
    """The payload announcing that a task was paused or resumed at ``instant``."""
    return f"{encode_due(instant)}:{_PAUSES_CHANGED}"


def decode_due(payload: str) -> datetime | None:
    try:
        return _EPOCH + int(payload) * _MICROSECOND
    except (TypeError, ValueError, OverflowError):
        return None


def decode(payload: str) -> Wakeup | None:
    """The wake-up a payload announces; None for a payload this engine did not write."""
    micros, sep, rest = payload.partition(":")
    due = decode_due(micros)
    if due is None:
        return None
    if not sep:
        return Wakeup(due)
    if rest == _PAUSES_CHANGED:
        return Wakeup(due, pauses_changed=True)
    length, sep, names = rest.partition(":")
    if not sep or not (length.isascii() and length.isdigit()) or int(length) > len(names):
        return Wakeup(due)  # the due time alone is still a sound hint
    cut = int(length)
    return Wakeup(due, TaskInstanceId(names[:cut], names[cut:]))


class NotificationListener:
    """A thread holding one psycopg connection (outside the pool, in autocommit) that LISTENs on
    the channel that the SQL expression ``channel`` (from :func:`channel_for`) names.

    ``on_wakeup(wakeup, connection)`` runs on this thread for each notification, outside
    psycopg's notification generator, so it may run a statement on the connection.
    """

    def __init__(
        self,
        engine: sa.Engine,
        channel: str,
        on_wakeup: Callable[[Wakeup, Any], None],
        *,
        reconnect_delay: float = 1.0,
        outage: OutagePolicy = DEFAULT_OUTAGE_POLICY,
    ) -> None:
        self.engine = engine
        self.channel = channel
        self.on_wakeup = on_wakeup
        self.reconnect_delay = reconnect_delay
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ekbatan-notify-listener", daemon=True)
        self._connection: Any = None
        self.listening = threading.Event()
        self.failures = FailureLog("listening for scheduling notifications", log, policy=outage)

    def start(self) -> None:
        self._thread.start()

    def _connect(self) -> Any:
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
        # This connection also claims rows now and then: TCP keepalives (unless the URL sets
        # them) and a statement timeout keep a dead peer or a stuck statement from hanging it.
        for option, value in KEEPALIVES.items():
            cparams.setdefault(option, value)
        connection = self.engine.dialect.loaded_dbapi.connect(*cargs, **cparams)
        try:
            connection.autocommit = True
            connection.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            name = connection.execute(f"SELECT {self.channel}").fetchone()[0]
            connection.execute(f'LISTEN "{name}"')
        except BaseException:
            connection.close()  # not yet ours to close later: it never reached self._connection
            raise
        return connection

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._connection = self._connect()
                self.failures.succeeded()
                self.listening.set()
                while not self._stopping.is_set():
                    # short, so stop() is prompt; waking costs no query. The generator holds
                    # the connection's lock, so the payloads are read out of it first.
                    payloads = [n.payload for n in self._connection.notifies(timeout=0.1, stop_after=1)]
                    for payload in payloads:
                        wakeup = decode(payload)
                        if wakeup is not None:
                            self.on_wakeup(wakeup, self._connection)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                self.listening.clear()
                # polling goes on meanwhile; this only delays hearing other processes' schedules
                self._stopping.wait(
                    self.failures.policy.backoff(self.reconnect_delay, self.failures.failed(exc))
                )
            finally:
                self._close()

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                log.debug("closing the notification connection failed", exc_info=True)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
