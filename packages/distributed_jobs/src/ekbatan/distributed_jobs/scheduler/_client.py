"""Schedule, reschedule, cancel and list executions — from a running scheduler or from any
process holding an engine.

Every call accepts ``connection=`` (an SQLAlchemy ``Connection`` or ORM ``Session``): the
statements then run inside the caller's transaction and are never committed here, so
rolling that transaction back schedules nothing.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._after_commit import run_after_commit
from ekbatan.distributed_jobs.scheduler._clock import Clock, SystemClock, ensure_utc
from ekbatan.distributed_jobs.scheduler._controls import OperatorControls
from ekbatan.distributed_jobs.scheduler._errors import (
    DataClassMismatchError,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)
from ekbatan.distributed_jobs.scheduler._execution import TaskInstanceId
from ekbatan.distributed_jobs.scheduler._instances import (
    InstanceKey,
    SchedulableInstance,
    TaskInstance,
    instance_key as _key,
)
from ekbatan.distributed_jobs.scheduler._polling.change_watch import ChangeWatch, watch_changes
from ekbatan.distributed_jobs.scheduler._polling.wakeups import channel_for
from ekbatan.distributed_jobs.scheduler._serializers import JsonSerializer, Serializer
from ekbatan.distributed_jobs.scheduler._table.listing import (
    ScheduledExecution,
    ScheduledExecutionsFilter,
    TaskSummary,
)
from ekbatan.distributed_jobs.scheduler._table.node_claims import NodeClaims, read_node_claims
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import (
    KEEP_DATA,
    ConnectionLike,
    NewExecution,
    as_connection,
)
from ekbatan.distributed_jobs.scheduler._table.session_setup import install_session_setup
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._telemetry.propagation import ScheduleTracing
from ekbatan.distributed_jobs.scheduler._telemetry.wiring import schedule_tracing
from ekbatan.distributed_jobs.scheduler.dialects import Dialect, SqlDialect, resolve_dialect
from ekbatan.distributed_jobs.scheduler.schema import DEFAULT_TABLE_NAME

#: an aware datetime, or a delay from now
When = datetime | timedelta

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.client")


class WhenExists(enum.Enum):
    """What ``schedule(...)`` does when the key is already scheduled."""

    DO_NOTHING = "do_nothing"
    RESCHEDULE = "reschedule"


class SchedulerClient(OperatorControls):
    """Talks to ``scheduled_tasks`` directly; no threads, no polling.

    ``tasks`` are the tasks this client knows: their data types decode listings; rows of
    other task names come back with raw bytes.
    """

    def __init__(
        self,
        engine: sa.Engine,
        tasks: Iterable[Task[Any]] = (),
        *,
        serializer: Serializer | None = None,
        table_name: str = DEFAULT_TABLE_NAME,
        priority_enabled: bool = False,
        dialect: str | Dialect | SqlDialect | None = None,
        clock: Clock | None = None,
        notify: bool = True,
        tracing: bool = False,
        tracer_provider: Any = None,
        _repository: TaskRepository | None = None,
        _on_scheduled: Callable[..., None] | None = None,
        _schedule_tracing: ScheduleTracing | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.serializer: Serializer = serializer or JsonSerializer()
        if _repository is None:
            backend = resolve_dialect(engine, dialect)
            install_session_setup(engine, backend)
            _repository = TaskRepository(
                engine,
                backend,
                TaskResolver(tasks),
                table_name=table_name,
                picked_by="SchedulerClient",
                priority_enabled=priority_enabled,
                notify_channel=channel_for(table_name) if notify else None,
            )
        self._repository = _repository
        self._on_scheduled = _on_scheduled
        #: a PRODUCER span per schedule call made under a span, its context kept for the run
        self._schedule_tracing: ScheduleTracing | None = (
            schedule_tracing(_repository, self.clock, tracer_provider) if tracing else _schedule_tracing
        )

    @classmethod
    def create(cls, engine: sa.Engine, *tasks: Task[Any], **options: Any) -> SchedulerClient:
        return cls(engine, tasks, **options)

    # ------------------------------------------------------------------ helpers
    @property
    def table_name(self) -> str:
        """The table this client reads and writes (``scheduled_tasks`` unless configured)."""
        return self._repository.table_name

    @property
    def repository(self) -> TaskRepository:
        return self._repository

    @property
    def notifies(self) -> bool:
        """Whether scheduling on this table notifies listeners (PostgreSQL, ``notify`` on), so
        that :meth:`watch_changes` can hear it."""
        return self._repository.notify_channel is not None

    def watch_changes(self, on_change: Callable[[], None]) -> ChangeWatch | None:
        """Call ``on_change()`` (on a thread of the watch's own) each time a process schedules,
        reschedules, pauses or resumes on this table, as PostgreSQL notifies it; the watch is
        started, ``stop()`` ends it. None where the database sends no notifications (MySQL,
        MariaDB, SQLite, or ``notify=False``): poll instead. Completions notify nothing, so a
        reader showing counts still refreshes now and then."""
        return watch_changes(self._repository, on_change)

    def _time(self, when: When | None, default: Callable[[datetime], datetime] | None = None) -> datetime:
        now = self.clock.now()
        if when is None:
            return default(now) if default is not None else now
        if isinstance(when, timedelta):
            return now + when
        if isinstance(when, datetime):
            return ensure_utc(when)
        raise TypeError(f"execution time must be an aware datetime or a timedelta from now, got {when!r}")

    def _new(self, instance: TaskInstance[Any], execution_time: datetime) -> NewExecution:
        resolver = self._repository.resolver
        task = resolver.resolve(instance.task_name)
        if task is None:
            resolver.scheduling_unknown(instance.task_name)
        priority = instance.priority
        if priority is None and task is not None:
            priority = task.default_priority
        return NewExecution(
            instance.task_name,
            instance.id,
            execution_time,
            self.serializer.serialize(instance.data),
            priority,
        )

    def _scheduled(
        self, key: TaskInstanceId, execution_time: datetime, connection: ConnectionLike | None = None
    ) -> None:
        if self._on_scheduled is None:
            return
        if connection is None:
            self._on_scheduled(key, execution_time)
            return
        # Invisible to pollers (and possibly undone) until the caller commits.
        notify = self._on_scheduled
        run_after_commit(as_connection(connection), lambda: notify(key, execution_time, committing=True))

    def _producing(
        self, rows: Sequence[NewExecution], connection: ConnectionLike | None
    ) -> AbstractContextManager[None]:
        tracing = self._schedule_tracing
        return nullcontext() if tracing is None else tracing.producing(rows, connection)

    @staticmethod
    def _split(
        item: TaskInstance[Any] | SchedulableInstance[Any], when: When | None
    ) -> tuple[TaskInstance[Any], Callable[[datetime], datetime] | None]:
        if isinstance(item, SchedulableInstance):
            return item.instance, item.time_rule
        if isinstance(item, TaskInstance):
            return item, None
        raise TypeError(f"expected a TaskInstance or SchedulableInstance, got {item!r}")

    # ------------------------------------------------------------------ scheduling
    def schedule_if_not_exists(
        self,
        instance: TaskInstance[Any] | SchedulableInstance[Any],
        execution_time: When | None = None,
        *,
        connection: ConnectionLike | None = None,
    ) -> bool:
        """Insert the execution unless its key exists; True when it was inserted."""
        inst, rule = self._split(instance, execution_time)
        when = self._time(execution_time, rule)
        new = self._new(inst, when)
        with self._producing((new,), connection):
            created = self._repository.create_if_not_exists(new, connection)
        if created:
            self._scheduled(inst.key, when, connection)
        return created

    def schedule(
        self,
        instance: TaskInstance[Any] | SchedulableInstance[Any],
        execution_time: When | None = None,
        *,
        when_exists: WhenExists | str = WhenExists.DO_NOTHING,
        connection: ConnectionLike | None = None,
    ) -> bool:
        """Schedule ``instance`` at ``execution_time`` (default: now).

        Returns True when a new execution was created — or, with ``when_exists="reschedule"``,
        when an existing, not-picked execution was moved to the new time (with the new data,
        if any) instead.
        """
        policy = WhenExists(when_exists) if isinstance(when_exists, str) else when_exists
        inst, rule = self._split(instance, execution_time)
        when = self._time(execution_time, rule)
        new = self._new(inst, when)
        with self._producing((new,), connection):
            created = self._repository.create_if_not_exists(new, connection)
        if created:
            self._scheduled(inst.key, when, connection)
            return True
        if policy is WhenExists.RESCHEDULE:
            data = inst.data if inst.data is not None else KEEP_DATA
            try:
                return self.reschedule(inst.key, when, data, connection=connection)
            except TaskInstanceNotFoundError:
                log.warning(
                    "%s vanished between the insert attempt and the reschedule; not scheduled", inst.key
                )
        return False

    def schedule_batch(
        self,
        instances: Iterable[TaskInstance[Any] | SchedulableInstance[Any] | tuple[TaskInstance[Any], When]],
        execution_time: When | None = None,
        *,
        connection: ConnectionLike | None = None,
        chunk_size: int = 1000,
    ) -> int:
        """Insert many executions, ``chunk_size`` rows per statement batch, in one transaction
        (or the caller's). Any key that already exists fails the whole batch with
        :class:`FailedToScheduleBatchError`. Returns the number scheduled."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        rows: list[NewExecution] = []
        for item in instances:
            if isinstance(item, tuple):
                inst, when = item[0], self._time(item[1])
            else:
                inst, rule = self._split(item, execution_time)
                when = self._time(execution_time, rule)
            rows.append(self._new(inst, when))
        if not rows:
            return 0
        with self._producing(rows, connection):
            if connection is None:
                with self._repository.engine.begin() as conn:
                    self._insert_chunks(rows, conn, chunk_size)
            else:
                self._insert_chunks(rows, connection, chunk_size)
        if self._on_scheduled is not None:
            for row in rows:
                self._scheduled(
                    TaskInstanceId(row.task_name, row.instance_id), row.execution_time, connection
                )
        return len(rows)

    def _insert_chunks(self, rows: Sequence[NewExecution], connection: ConnectionLike, size: int) -> None:
        for start in range(0, len(rows), size):
            self._repository.create_batch(rows[start : start + size], connection)

    def reschedule(
        self,
        key: InstanceKey,
        execution_time: When,
        new_data: Any = KEEP_DATA,
        *,
        connection: ConnectionLike | None = None,
    ) -> bool:
        """Move a not-picked execution to ``execution_time``, optionally with new data.

        Resets its failure bookkeeping (last success/failure, consecutive failures).
        """
        ident = _key(key)
        when = self._time(execution_time)
        existing = self._existing(ident, connection)
        raw = KEEP_DATA if new_data is KEEP_DATA else self.serializer.serialize(new_data)
        self._repository.reschedule(
            existing.execution,
            when,
            last_success=None,
            last_failure=None,
            consecutive_failures=0,
            new_data=raw,
            connection=connection,
            notify=True,
        )
        self._scheduled(ident, when, connection)
        return True

    def cancel(self, key: InstanceKey, *, connection: ConnectionLike | None = None) -> None:
        """Delete a not-picked execution, or a held one (dead, or paused one by one)."""
        ident = _key(key)
        try:
            existing = self._existing(ident, connection)
        except TaskInstanceNotFoundError:
            if connection is None and self._drop_held(ident):
                return
            raise
        self._repository.remove(existing.execution, connection)

    def _drop_held(self, ident: TaskInstanceId) -> bool:
        try:
            return self._repository.drop_held(ident.task_name, ident.id)
        except sa.exc.SQLAlchemyError:
            return False  # no held table (not migrated yet): nothing held to drop

    def _existing(self, ident: TaskInstanceId, connection: ConnectionLike | None) -> ScheduledExecution:
        found = self.get_scheduled_execution(ident, connection=connection)
        if found is None:
            raise TaskInstanceNotFoundError(ident.task_name, ident.id)
        if found.is_picked:
            raise TaskInstanceCurrentlyExecutingError(ident.task_name, ident.id)
        return found

    # ------------------------------------------------------------------ reading
    def _view(self, execution: Any, data_type: Any = None) -> ScheduledExecution:
        task = self._repository.resolver.resolve(execution.task_name)
        if data_type is not None:
            wanted = data_type
        elif task is not None:
            wanted = task.data_type
        else:
            return ScheduledExecution(execution)

        def decode(raw: bytes | None) -> Any:
            value = self.serializer.deserialize(wanted, raw)
            mismatch = isinstance(data_type, type) and value is not None and not isinstance(value, data_type)
            if mismatch:
                raise DataClassMismatchError(
                    f"data of {execution.task_name}/{execution.instance_id} is a "
                    f"{type(value).__name__}, not the requested {data_type.__name__}"
                )
            return value

        return ScheduledExecution(execution, decode)

    def get_scheduled_execution(
        self, key: InstanceKey, *, connection: ConnectionLike | None = None
    ) -> ScheduledExecution | None:
        """The execution with this key, picked or not, known task or not."""
        ident = _key(key)
        execution = self._repository.get_execution(ident.task_name, ident.id, connection)
        return None if execution is None else self._view(execution)

    def get_scheduled_executions(
        self,
        filter: ScheduledExecutionsFilter | None = None,
        *,
        connection: ConnectionLike | None = None,
    ) -> list[ScheduledExecution]:
        """Executions matching ``filter`` (default: every not-picked execution)."""
        f = filter if filter is not None else ScheduledExecutionsFilter.all().with_picked(False)
        return [self._view(e) for e in self._repository.get_scheduled_executions(f, connection=connection)]

    def get_scheduled_executions_for_task(
        self,
        task_name: str,
        data_type: Any = None,
        filter: ScheduledExecutionsFilter | None = None,
        *,
        connection: ConnectionLike | None = None,
    ) -> list[ScheduledExecution]:
        f = filter if filter is not None else ScheduledExecutionsFilter.all().with_picked(False)
        rows = self._repository.get_scheduled_executions(f, task_name=task_name, connection=connection)
        return [self._view(e, data_type) for e in rows]

    def get_scheduled_executions_summary_by_task(
        self, *, connection: ConnectionLike | None = None, due_at: datetime | None = None
    ) -> list[TaskSummary]:
        """Per task name, from one grouped read; ``due_at`` also counts the executions due then
        (``TaskSummary.due_count``)."""
        return self._repository.summary_by_task(connection, due_at)

    def claims_by_node(self) -> list[NodeClaims]:
        """Per scheduler node (``picked_by``) holding picked executions now: how many, and the
        newest and oldest of their heartbeats (written by that node's clock), by node name."""
        return read_node_claims(self._repository)

    def __repr__(self) -> str:
        r = self._repository
        return f"SchedulerClient(table={r.table_name!r}, dialect={r.dialect.name!r})"
