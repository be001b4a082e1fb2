"""Watching a table for other processes' changes, for readers that show it (an operator page).

On PostgreSQL whoever schedules, reschedules, pauses or resumes through this engine notifies
the table's channel at commit; a watch listens on that channel with one connection of its own
and calls back. Completions and deletions send nothing, so a watcher still refreshes now and
then; the watch only makes the changes that do notify show at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ekbatan.distributed_jobs.scheduler._liveness.outage import DEFAULT_OUTAGE_POLICY
from ekbatan.distributed_jobs.scheduler._polling.notified_claims import start_listening
from ekbatan.distributed_jobs.scheduler._polling.wakeups import Wakeup
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository

__all__ = ["ChangeWatch", "watch_changes"]


class ChangeWatch(Protocol):
    """A started watch: ``listening`` is set while its connection listens; ``stop`` ends it."""

    @property
    def listening(self) -> threading.Event: ...

    def stop(self, timeout: float = 5.0) -> None: ...


def watch_changes(repository: TaskRepository, on_change: Callable[[], None]) -> ChangeWatch | None:
    """A started watch calling ``on_change()`` on its own thread for each notification of the
    repository's table; None where the database sends none (not PostgreSQL, no psycopg 3
    driver, or notifications turned off)."""

    def changed(_wakeup: Wakeup, _connection: Any) -> None:
        on_change()

    listener, _ = start_listening(repository, "change watch", changed, DEFAULT_OUTAGE_POLICY, None)
    return listener
