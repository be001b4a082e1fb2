"""Which task names this process knows, and the ones it met in the table but does not.

Rows of unknown task names stay in the table for other instances that may know them (rolling
upgrades, canaries); this instance only excludes them from its queries and, after
``delete_unresolved_after``, deletes them. Each unknown name is logged once at WARNING with the
known names closest to it: a misspelled name given to ``schedule()`` is otherwise silent.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task

log = logging.getLogger("ekbatan.distributed_jobs.scheduler")


class TaskResolver:
    def __init__(self, tasks: Iterable[Task[Any]], on_unresolved: Any = None) -> None:
        self._tasks: dict[str, Task[Any]] = {}
        for task in tasks:
            if task.name in self._tasks:
                raise ValueError(f"two tasks are named {task.name!r}; task names must be unique")
            self._tasks[task.name] = task
        self._lock = threading.Lock()
        self._unresolved: dict[str, datetime] = {}
        self._unresolved_names: tuple[str, ...] = ()
        self._on_unresolved = on_unresolved
        # names already warned about: a name forgotten after deletion and met again is not
        # news to whoever read the first line
        self._warned: set[str] = set()
        #: task names paused cluster-wide (as last read from the pauses table)
        self._paused: frozenset[str] = frozenset()
        self._claimable: tuple[str, ...] = tuple(sorted(self._tasks))

    def resolve(self, task_name: str) -> Task[Any] | None:
        return self._tasks.get(task_name)

    @property
    def tasks(self) -> Mapping[str, Task[Any]]:
        return self._tasks

    def add_unresolved(self, task_name: str, execution_time: datetime) -> None:
        """Remember an unknown name; its age counts from the row's ``execution_time``."""
        with self._lock:
            if task_name in self._unresolved:
                return
            self._unresolved[task_name] = execution_time
            self._unresolved_names = tuple(self._unresolved)
            first_time = task_name not in self._warned
            self._warned.add(task_name)
        if first_time:
            self._warn_unknown(task_name)
        if self._on_unresolved is not None:
            self._on_unresolved(task_name)

    def scheduling_unknown(self, task_name: str) -> None:
        """A client that knows tasks is scheduling a name none of them has: say so once, now,
        rather than when a poller meets the row (a misspelled name is otherwise accepted
        silently). A client that knows no task schedules anything without a word."""
        if not self._tasks or task_name in self._tasks:
            return
        with self._lock:
            first_time = task_name not in self._warned
            self._warned.add(task_name)
        if first_time:
            self._warn_unknown(task_name, "scheduling")

    def _warn_unknown(self, task_name: str, where: str = "in the scheduled tasks") -> None:
        closest = difflib.get_close_matches(task_name, list(self._tasks), n=3, cutoff=0.6)
        log.warning(
            "unknown task name %r %s: no task of this scheduler has that name, so its due executions "
            "wait for an instance that knows it; closest known task names: %s",
            task_name,
            where,
            ", ".join(repr(name) for name in closest) if closest else "none",
        )

    def unresolved_names(self) -> tuple[str, ...]:
        return self._unresolved_names

    def set_paused(self, names: frozenset[str]) -> None:
        """The task names paused now; their due executions are not to be claimed."""
        if names != self._paused:
            self._paused = names
            self._claimable = tuple(sorted(set(self._tasks) - names))

    def paused_names(self) -> frozenset[str]:
        return self._paused

    def excluded_names(self) -> tuple[str, ...]:
        """Names whose rows polls pass over: unknown to this process, or paused."""
        if not self._paused:
            return self._unresolved_names
        return tuple(sorted(set(self._unresolved_names) | self._paused))

    def claimable_names(self) -> tuple[str, ...]:
        """The known task names not paused, sorted."""
        return self._claimable

    def unresolved(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._unresolved)

    def forget_unresolved(self, task_name: str) -> None:
        with self._lock:
            self._unresolved.pop(task_name, None)
            self._unresolved_names = tuple(self._unresolved)
