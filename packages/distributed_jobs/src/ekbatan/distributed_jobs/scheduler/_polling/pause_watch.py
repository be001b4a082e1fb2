"""Which task names are paused cluster-wide, as this process's polls see it.

The pauses table is read before a poll when the last read is most of a polling interval old,
or at once after a notification said the pauses changed (PostgreSQL). Polls every interval
at the latest read it again, so a pause or resumption made on any node takes effect
everywhere within one polling interval, without a read per poll on a busy scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler.schema import table_exists

log = logging.getLogger("ekbatan.distributed_jobs.scheduler")

#: read again once this share of the polling interval has passed since the last read: polls
#: come at least once per interval, so the one after a change always reads
_REFRESH_SHARE = 0.9


class PauseWatch:
    def __init__(self, repository: TaskRepository, polling_interval: timedelta) -> None:
        self.repository = repository
        self.refresh_after = polling_interval.total_seconds() * _REFRESH_SHARE
        self._read_at: float | None = None
        self._stale = threading.Event()
        self._missing_warned = False

    def invalidate(self) -> None:
        """The pauses changed: read them before the next claim."""
        self._stale.set()

    def refresh(self, *, now: bool = False) -> None:
        """Read the paused names into the resolver when due (``now``: whatever the age)."""
        fresh = self._read_at is not None and time.monotonic() - self._read_at < self.refresh_after
        if fresh and not now and not self._stale.is_set():
            return
        self._stale.clear()
        try:
            names = self.repository.paused_task_names()
        except sa.exc.SQLAlchemyError:
            if not self._pauses_table_missing():
                self._stale.set()
                raise
            names = frozenset()
        self._read_at = time.monotonic()
        resolver = self.repository.resolver
        if names != resolver.paused_names():
            log.info("paused tasks: %s", ", ".join(sorted(names)) if names else "none")
        resolver.set_paused(names)

    def _pauses_table_missing(self) -> bool:
        table = self.repository.pauses_table
        with self.repository.engine.connect() as conn:
            if table_exists(conn, table):
                return False
        if not self._missing_warned:
            self._missing_warned = True
            log.warning(
                "table %s does not exist, so no task is treated as paused; create it with "
                "`ekbatan migrate` (or create_table(engine, %r)), which adds it beside %s",
                table,
                self.repository.table_name,
                self.repository.table_name,
            )
        return True
