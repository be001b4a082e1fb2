"""The operator's controls of the client: pause and resume (a task name, or one execution),
dead letters (list, retry), dropping a held execution, and what is held — the calls behind
``ekbatan tasks pause``, ``resume``, ``retry``, ``list --dead`` and the operator view's actions.

A task name is paused by a row in ``<table>_pauses``: pollers of this engine then leave its due
executions in ``scheduled_tasks``, due time and all, until it is resumed. One execution is
paused by moving it to ``<table>_held`` (with its due time); dead executions are kept there
too. Held executions are out of ``scheduled_tasks``, so no scheduler — ours or a Java
db-scheduler sharing the table — runs them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ekbatan.distributed_jobs.scheduler._errors import (
    HoldError,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)
from ekbatan.distributed_jobs.scheduler._history.records import HistoryEntry, RunResult, TaskHistorySummary
from ekbatan.distributed_jobs.scheduler._history.table import HistoryTable
from ekbatan.distributed_jobs.scheduler._instances import InstanceKey, instance_key
from ekbatan.distributed_jobs.scheduler._table.held_rows import (
    HeldExecution,
    HoldState,
    Released,
    TaskPause,
    default_actor,
)

if TYPE_CHECKING:
    from ekbatan.distributed_jobs.scheduler._clock import Clock
    from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository


class OperatorControls:
    """Mixed into :class:`SchedulerClient`."""

    _repository: TaskRepository
    clock: Clock

    def pause_task(self, task_name: str, *, reason: str | None = None, by: str | None = None) -> bool:
        """Pause a task name cluster-wide: every instance, those scheduled later too.

        Its due executions stay where they are, due time and all; schedulers of this table
        claim none of them until :meth:`resume_task` (within one polling interval on every
        node, at once on PostgreSQL). A running execution finishes. ``by`` defaults to
        ``user@host``. False when it was paused already (the first pause's who, when and why
        are kept). Not to be confused with ``Scheduler.pause()``, which stops one process's
        polling and nothing else.
        """
        return self._repository.pause_task(
            task_name, now=self.clock.now(), by=by or default_actor(), reason=reason
        )

    def pause_execution(self, key: InstanceKey, *, reason: str | None = None, by: str | None = None) -> bool:
        """Take one not-picked execution out of the schedule, due time kept, until
        :meth:`resume_execution`; False when it was paused already."""
        ident = instance_key(key)
        task_name, instance_id = ident.task_name, ident.id
        execution = self._repository.get_execution(task_name, instance_id)
        if execution is None:
            held = self._repository.get_held(task_name, instance_id)
            if held is not None and held.state is HoldState.PAUSED:
                return False
            raise TaskInstanceNotFoundError(task_name, instance_id)
        if execution.picked:
            raise TaskInstanceCurrentlyExecutingError(task_name, instance_id)
        existing = self._repository.get_held(task_name, instance_id)
        if existing is not None:
            raise HoldError(
                f"{task_name}/{instance_id} is also held as {existing.state.value} since "
                f"{existing.held_at:%Y-%m-%d %H:%M:%S} UTC; retry or cancel that one first "
                f"(ekbatan tasks retry|cancel {task_name} {instance_id})"
            )
        actor = by or default_actor()
        if not self._repository.hold(
            execution, HoldState.PAUSED, now=self.clock.now(), by=actor, reason=reason
        ):
            raise HoldError(
                f"{task_name}/{instance_id} changed while being paused (picked or rescheduled); try again"
            )
        return True

    def resume_task(self, task_name: str) -> Released:
        """Lift a task's pause, and put back every execution of it paused one by one (each
        with the due time it was paused with: an overdue one runs at once). Raises
        :class:`HoldError` when nothing of that name is paused."""
        lifted = self._repository.resume_task(task_name, now=self.clock.now())
        return self._resumed(task_name, None, lifted)

    def resume_execution(self, key: InstanceKey) -> Released:
        """Put one paused execution back, with the due time it was paused with."""
        ident = instance_key(key)
        return self._resumed(ident.task_name, ident.id, False)

    def _resumed(self, task_name: str, instance_id: str | None, lifted: bool) -> Released:
        back, left = self._repository.release_held(
            task_name, instance_id, state=HoldState.PAUSED, execution_time=None, reset_failures=False
        )
        if not lifted and not back and not left:
            what = task_name if instance_id is None else f"{task_name}/{instance_id}"
            raise HoldError(f"{what} is not paused (ekbatan tasks list --paused lists what is)")
        return Released(task_name, tuple(back), tuple(left), lifted)

    def paused_tasks(self) -> list[TaskPause]:
        """The task names paused as a whole, with who paused them, when and why."""
        return self._repository.task_pauses()

    def retry_dead(
        self, task_name: str, instance_id: str | None = None, *, when: datetime | None = None
    ) -> Released:
        """Send dead executions back to the schedule — one, or every one of ``task_name`` —
        due ``when`` (default: now), their failure count reset so that their retries start
        over. Raises :class:`HoldError` when there is no such dead execution."""
        back, left = self._repository.release_held(
            task_name,
            instance_id,
            state=HoldState.DEAD,
            execution_time=when or self.clock.now(),
            reset_failures=True,
        )
        if not back and not left:
            what = task_name if instance_id is None else f"{task_name}/{instance_id}"
            raise HoldError(f"no dead execution {what} (ekbatan tasks list --dead lists them)")
        return Released(task_name, tuple(back), tuple(left))

    def cancel_held(self, task_name: str, instance_id: str, *, state: HoldState | str | None = None) -> None:
        """Delete one held execution (dead, or paused one by one) for good; with ``state``, only
        while it is still held as that. Unlike :meth:`cancel`, it never touches
        ``scheduled_tasks``: an execution of the same key scheduled there (one resumed or
        retried meanwhile, or scheduled anew) is left alone. Raises :class:`HoldError` when no
        such held execution is there."""
        wanted = None if state is None else HoldState(state)
        if not self._repository.drop_held(task_name, instance_id, state=wanted):
            what = f"{task_name}/{instance_id}"
            held_as = "held" if wanted is None else f"held as {wanted.value}"
            raise HoldError(f"{what} is not {held_as} (ekbatan tasks list --dead|--paused lists what is)")

    def get_held_executions(
        self,
        *,
        state: HoldState | str | None = None,
        task_name: str | None = None,
        limit: int = 100,
        after: tuple[str, str] | None = None,
    ) -> list[HeldExecution]:
        """Dead and individually paused executions, in key order; ``after`` the last key of a
        page reads the next page."""
        if not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be between 1 and 10000, got {limit}")
        wanted = None if state is None else HoldState(state)
        return self._repository.list_held(state=wanted, task_name=task_name, limit=limit, after=after)

    def get_held_execution(self, task_name: str, instance_id: str) -> HeldExecution | None:
        return self._repository.get_held(task_name, instance_id)

    def count_held(self) -> dict[tuple[str, HoldState], int]:
        """How many executions are held, per ``(task_name, state)``."""
        return self._repository.count_held()

    # ------------------------------------------------------------------ execution history
    def history(
        self,
        task_name: str | None = None,
        instance_id: str | None = None,
        *,
        since: datetime | None = None,
        result: RunResult | str | None = None,
        failed: bool = False,
        limit: int = 100,
        before: tuple[datetime, int] | None = None,
    ) -> list[HistoryEntry]:
        """Finished runs, newest first (the schedulers record them with execution history on).
        ``failed``: only runs that did not succeed. ``before``: the ``cursor`` of the last entry
        of a page, to read the next page."""
        if not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be between 1 and 10000, got {limit}")
        wanted = None if result is None else RunResult(result)
        return HistoryTable(self._repository).read(
            task_name=task_name,
            instance_id=instance_id,
            since=since,
            result=wanted,
            failed=failed,
            limit=limit,
            before=before,
        )

    def history_summary(self, since: datetime | timedelta = timedelta(days=1)) -> list[TaskHistorySummary]:
        """Per task name since ``since`` (a time, or how long ago; default one day): runs,
        failures, p50/p95 duration, the last run."""
        start = self.clock.now() - since if isinstance(since, timedelta) else since
        return HistoryTable(self._repository).summary(start)
