"""Start-up tasks: the recurring tasks that schedule themselves when the scheduler starts.

A start-up task whose ``on_startup`` fails stays pending and is tried again before each poll.
Failing on the database is an outage to wait for (one log line per streak, and the task is
listed as waiting for the database); failing on its own code (data that does not serialize, a
row executing with another schedule) is said once, naming the task, with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ekbatan.distributed_jobs.scheduler._client import SchedulerClient
from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._liveness.outage import (
    FailureLog,
    OutagePolicy,
    describe,
    is_database_error,
)
from ekbatan.distributed_jobs.scheduler._observability import Listeners, SchedulerEventType
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task

# the scheduler's own logger: these lines are part of its start-up
log = logging.getLogger("ekbatan.distributed_jobs.scheduler.scheduler")


class StartupTasks:
    def __init__(
        self,
        tasks: Iterable[Task[Any]],
        client: SchedulerClient,
        clock: Clock,
        listeners: Listeners,
        outage: OutagePolicy,
    ) -> None:
        self.tasks = list(tasks)
        self._client = client
        self._clock = clock
        self._listeners = listeners
        # those whose on_startup has not succeeded yet
        self._pending = list(self.tasks)
        # names of the pending ones whose last try failed on the database (not on their own code)
        self._waiting_for_database: tuple[str, ...] = ()
        self._errors_logged: set[str] = set()
        self._failures = FailureLog("scheduling start-up tasks", log, policy=outage)

    @property
    def pending(self) -> list[str]:
        return [task.name for task in self._pending]

    @property
    def waiting_for_database(self) -> list[str]:
        return list(self._waiting_for_database)

    def run(self) -> None:
        """Run ``on_startup`` of each start-up task not yet done; a failing one stays pending."""
        now = self._clock.now()
        waiting: list[str] = []
        for task in list(self._pending):
            try:
                task.on_startup(self._client, now)
            except Exception as exc:
                if is_database_error(exc):
                    waiting.append(task.name)
                    self._failures.failed(exc)
                elif task.name not in self._errors_logged:
                    # its own fault, not an outage's: said once, naming it, with the traceback
                    self._errors_logged.add(task.name)
                    log.error(
                        "start-up task %s cannot be scheduled: %s; tried again before each poll",
                        task.name,
                        describe(exc),
                        exc_info=exc,
                    )
                self._listeners.on_scheduler_event(SchedulerEventType.UNEXPECTED_ERROR)
            else:
                self._pending.remove(task)
        self._waiting_for_database = tuple(waiting)
        if not waiting:
            self._failures.succeeded()  # the outage is over for start-up tasks

    def retry(self) -> None:
        """Before each poll: run the pending ones again, if any."""
        if self._pending:
            self.run()
