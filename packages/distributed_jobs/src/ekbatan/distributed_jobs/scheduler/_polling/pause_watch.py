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
        # Notifications of a change counted, and how many of them the names in the resolver
        # include: the listener thread asks whether the names are current while the poller
        # thread may be between clearing a flag and storing what it read.
        self._lock = threading.Lock()
        self._changes = 0
        self._applied = 0
        self._missing_warned = False

    def invalidate(self) -> None:
        """The pauses changed: read them before the next claim."""
        with self._lock:
            self._changes += 1

    @property
    def is_current(self) -> bool:
        """False from a change's notification until a read made after it is in the resolver:
        no claim may rely on the paused names meanwhile."""
        with self._lock:
            return self._applied == self._changes

    def refresh(self, *, now: bool = False) -> None:
        """Read the paused names into the resolver when due (``now``: whatever the age)."""
        with self._lock:
            changes = self._changes
        fresh = self._read_at is not None and time.monotonic() - self._read_at < self.refresh_after
        if fresh and not now and changes == self._applied:
            return
        try:
            names = self.repository.paused_task_names()
        except sa.exc.SQLAlchemyError:
            if not self._pauses_table_missing():
                raise  # not applied: the next poll reads again
            names = frozenset()
        self._read_at = time.monotonic()
        resolver = self.repository.resolver
        if names != resolver.paused_names():
            log.info("paused tasks: %s", ", ".join(sorted(names)) if names else "none")
        resolver.set_paused(names)
        with self._lock:
            # the read began after the changes counted then; later ones still need a read
            self._applied = changes

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
