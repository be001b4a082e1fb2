"""Listening for wake-up hints on every PostgreSQL shard while a pipeline job runs.

One thread and one connection per PostgreSQL shard (outside the pool, in autocommit), held only
while this instance runs the job: the instances that do not hold the job's row hold no
listening connection either. Each notification sets the job's wake-up event. Other dialects
have no notifications; their rounds start from polling alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ekbatan.core.persistence import DialectName, TransactionManager

log = logging.getLogger("ekbatan.local_event_handler")

#: libpq keepalives, unless the URL sets them: a silently dead peer must not hang the thread
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
_RECONNECT_DELAY = 1.0
#: how long one wait for notifications lasts, so stop() is prompt
_WAIT = 0.2


class ShardListeners:
    """``LISTEN`` on ``channel_for(eventlog_schema)`` on each PostgreSQL (psycopg 3) shard."""

    def __init__(
        self,
        managers: Sequence[TransactionManager],
        channel_for: Callable[[str], str],
        wakeup: threading.Event,
        name: str,
    ) -> None:
        self._wakeup = wakeup
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._listen,
                args=(manager, channel_for(manager.eventlog_schema)),
                name=f"{name}-listen-{manager.shard}",
                daemon=True,
            )
            for manager in managers
            if _can_listen(manager)
        ]
        self._shards = len(managers)
        self._lock = threading.Lock()
        self._waiting_for = len(self._threads)
        #: set once every shard's listener is listening (or has failed its first try)
        self.ready = threading.Event()
        if not self._threads:
            self.ready.set()

    @property
    def covers_every_shard(self) -> bool:
        """Whether every shard has a listener (all PostgreSQL with psycopg)."""
        return len(self._threads) == self._shards

    def start(self) -> ShardListeners:
        for thread in self._threads:
            thread.start()
        return self

    def _listen(self, manager: TransactionManager, channel: str) -> None:
        first = True
        while not self._stopping.is_set():
            connection = None
            try:
                connection = _connect(manager)
                connection.execute(f'LISTEN "{channel}"')
                if first:
                    first = False
                    self._arrived()
                # Anything committed while not listening was missed: look once now.
                self._wakeup.set()
                while not self._stopping.is_set():
                    if any(True for _ in connection.notifies(timeout=_WAIT, stop_after=1)):
                        self._wakeup.set()
            except Exception as error:
                if self._stopping.is_set():
                    break
                log.warning(
                    "listening for new outbox rows on shard %s failed (%s: %s); polling continues, "
                    "retrying in %.0fs",
                    manager.shard,
                    type(error).__name__,
                    error,
                    _RECONNECT_DELAY,
                )
                if first:
                    first = False
                    self._arrived()
                self._stopping.wait(_RECONNECT_DELAY)
            finally:
                if connection is not None:
                    try:
                        connection.close()
                    except Exception:
                        log.debug("closing the listening connection failed", exc_info=True)

    def _arrived(self) -> None:
        with self._lock:
            self._waiting_for -= 1
            if self._waiting_for == 0:
                self.ready.set()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)


def _can_listen(manager: TransactionManager) -> bool:
    engine = manager.primary.engine
    return manager.dialect is DialectName.POSTGRESQL and engine.dialect.driver == "psycopg"


def _connect(manager: TransactionManager) -> Any:
    engine = manager.primary.engine
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    for option, value in _KEEPALIVES.items():
        cparams.setdefault(option, value)
    connection = engine.dialect.loaded_dbapi.connect(*cargs, **cparams)
    try:
        connection.autocommit = True
    except BaseException:
        connection.close()
        raise
    return connection
