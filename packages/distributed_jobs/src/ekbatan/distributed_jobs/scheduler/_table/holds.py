"""Taking executions out of ``scheduled_tasks`` and putting them back, and pausing task names.

A held execution moves to ``<table>_held`` in the transaction that deletes its row (at the
version its holder read, as every write of the protocol), so it is in exactly one of the two
tables at any moment; it comes back by the reverse move. Task pauses are rows of
``<table>_pauses`` that pollers read (see :mod:`..._polling.pause_watch`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._polling.wakeups import encode_pauses_changed
from ekbatan.distributed_jobs.scheduler._table.access import TableAccess
from ekbatan.distributed_jobs.scheduler._table.held_ddl import held_table_name, pauses_table_name
from ekbatan.distributed_jobs.scheduler._table.held_rows import (
    MAX_ACTOR,
    ErrorRecord,
    HeldExecution,
    HoldState,
    TaskPause,
    bounded_reason,
)
from ekbatan.distributed_jobs.scheduler._table.retries import with_retries
from ekbatan.distributed_jobs.scheduler._table.rows import ConnectionLike, versioned_key
from ekbatan.distributed_jobs.scheduler.schema import table_exists

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.repository")

_HELD_COLUMNS = (
    "task_name, task_instance, state, task_data, execution_time, last_success, last_failure, "
    "consecutive_failures, priority, held_at, held_by, reason, error_class, error_message, error_traceback"
)
_KEY = "task_name = :task_name AND task_instance = :task_instance"
#: held rows put back per transaction when a whole task's are: bounded, so a retry of 100,000
#: dead letters neither holds one huge transaction nor reads them all into memory
RELEASE_BATCH = 500


class Holds(TableAccess):
    """The holding half of the protocol: dead letters, paused executions, paused task names."""

    @property
    def held_table(self) -> str:
        return held_table_name(self.table_name)

    @property
    def pauses_table(self) -> str:
        return pauses_table_name(self.table_name)

    @property
    def _held_exists(self) -> sa.TextClause:
        return sa.text(f"SELECT 1 FROM {self.held_table} WHERE {_KEY}")

    # ------------------------------------------------------------------ taking out
    def hold(
        self,
        execution: Execution,
        state: HoldState,
        *,
        now: datetime,
        by: str | None,
        reason: str | None = None,
        error: ErrorRecord | None = None,
        connection: ConnectionLike | None = None,
    ) -> bool:
        """Move ``execution`` (at the version read) to the held table; False when its row
        changed or went meanwhile (nothing is moved then)."""
        d = self.dialect
        error = error or ErrorRecord(None, None, None)
        params = {
            "task_name": execution.task_name,
            "task_instance": execution.instance_id,
            "state": state.value,
            "task_data": execution.raw_data,
            "execution_time": d.encode_time(execution.execution_time),
            "last_success": d.encode_time(execution.last_success),
            "last_failure": d.encode_time(execution.last_failure),
            "consecutive_failures": execution.consecutive_failures,
            "priority": execution.priority,
            "held_at": d.encode_time(now),
            "held_by": None if by is None else by[:MAX_ACTOR],
            "reason": bounded_reason(reason),
            "error_class": error.error_class,
            "error_message": error.message,
            "error_traceback": error.traceback,
        }
        key = {"task_name": execution.task_name, "task_instance": execution.instance_id}
        columns = ", ".join(f":{c.strip()}" for c in _HELD_COLUMNS.split(","))

        def move() -> bool | None:
            with self._tx(connection) as conn:
                if conn.execute(self._sql_remove, versioned_key(execution)).rowcount != 1:
                    return None
                # Looked up before deleting: on InnoDB a DELETE of a missing key locks the gap
                # where it would be, and two dead letters made at once (each gap-locked, each
                # inserting into the other's gap) would deadlock. The plain read locks nothing.
                replaced = conn.execute(self._held_exists, key).first() is not None
                if replaced:
                    conn.execute(sa.text(f"DELETE FROM {self.held_table} WHERE {_KEY}"), key)
                conn.execute(
                    sa.text(f"INSERT INTO {self.held_table} ({_HELD_COLUMNS}) VALUES ({columns})"), params
                )
                return replaced

        # In its own transaction, a write rolled back for a deadlock is tried again whole; in the
        # caller's, the caller's transaction is what is retried, if anything
        replaced = move() if connection is not None else with_retries(move)
        if replaced is None:
            return False
        if replaced:
            log.warning(
                "execution %s/%s is held (%s) in place of an earlier held execution with the same key",
                execution.task_name,
                execution.instance_id,
                state.value,
            )
        return True

    # ------------------------------------------------------------------ reading
    def get_held(
        self, task_name: str, instance_id: str, connection: ConnectionLike | None = None
    ) -> HeldExecution | None:
        """The held execution with that key; None when there is none — also when
        ``<table>_held`` does not exist (a table not migrated yet holds nothing)."""
        sql = sa.text(f"SELECT {_HELD_COLUMNS} FROM {self.held_table} WHERE {_KEY}")
        try:
            with self._read(connection) as conn:
                row = conn.execute(sql, {"task_name": task_name, "task_instance": instance_id}).first()
        except sa.exc.SQLAlchemyError:
            if connection is not None:
                raise  # the caller's transaction is spoilt on PostgreSQL either way
            with self.engine.connect() as conn:
                if table_exists(conn, self.held_table):
                    raise
            return None
        return None if row is None else self._held(row)

    def list_held(
        self,
        *,
        state: HoldState | None = None,
        task_name: str | None = None,
        limit: int = 100,
        after: tuple[str, str] | None = None,
        connection: ConnectionLike | None = None,
    ) -> list[HeldExecution]:
        """Held executions in key order, ``limit`` at most, after the key ``after`` (keyset
        pagination: pass the last key of a page to read the next)."""
        conditions, params = self._held_filter(state, task_name)
        if after is not None:
            conditions.append(
                "(task_name > :after_name OR (task_name = :after_name AND task_instance > :after_instance))"
            )
            params.update(after_name=after[0], after_instance=after[1])
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = sa.text(
            f"SELECT {_HELD_COLUMNS} FROM {self.held_table}{where} "
            f"ORDER BY task_name, task_instance{self.dialect.limit(limit)}"
        )
        with self._read(connection) as conn:
            return [self._held(r) for r in conn.execute(sql, params).all()]

    def count_held(self, connection: ConnectionLike | None = None) -> dict[tuple[str, HoldState], int]:
        """How many executions are held, per task name and state."""
        sql = sa.text(f"SELECT task_name, state, COUNT(*) FROM {self.held_table} GROUP BY task_name, state")
        with self._read(connection) as conn:
            return {(r[0], HoldState(r[1])): int(r[2]) for r in conn.execute(sql).all()}

    @staticmethod
    def _held_filter(state: HoldState | None, task_name: str | None) -> tuple[list[str], dict[str, Any]]:
        conditions, params = [], {}
        if state is not None:
            conditions.append("state = :state")
            params["state"] = state.value
        if task_name is not None:
            conditions.append("task_name = :task_name")
            params["task_name"] = task_name
        return conditions, params

    def _held(self, row: Sequence[Any]) -> HeldExecution:
        d = self.dialect
        return HeldExecution(
            task_name=row[0],
            instance_id=row[1],
            state=HoldState(row[2]),
            raw_data=d.decode_bytes(row[3]),
            execution_time=d.decode_required_time(row[4]),
            last_success=d.decode_time(row[5]),
            last_failure=d.decode_time(row[6]),
            consecutive_failures=row[7] or 0,
            priority=row[8],
            held_at=d.decode_required_time(row[9]),
            held_by=row[10],
            reason=row[11],
            error=ErrorRecord(row[12], row[13], row[14]),
        )

    # ------------------------------------------------------------------ putting back
    def release_held(
        self,
        task_name: str,
        instance_id: str | None,
        *,
        state: HoldState | None,
        execution_time: datetime | None,
        reset_failures: bool,
    ) -> tuple[list[str], list[str]]:
        """Put held executions of ``task_name`` (one, or all when ``instance_id`` is None) back
        in ``scheduled_tasks``, due at ``execution_time`` or at the due time they were held
        with. Returns the instances put back and those left held because ``scheduled_tasks``
        has an execution with their key now (scheduled again meanwhile)."""
        released: list[str] = []
        conflicts: list[str] = []
        after: tuple[str, str] | None = None
        # the row statements are known before the transaction opens: looking the columns up on
        # a second connection inside it would wait on its own lock where every transaction
        # begins IMMEDIATE (Ekbatan's SQLite setup)
        self.detect_columns()
        while True:
            with self.engine.begin() as conn:
                if instance_id is not None:
                    one = self.get_held(task_name, instance_id, conn)
                    batch = [one] if one is not None and (state is None or one.state is state) else []
                else:
                    batch = self.list_held(
                        state=state, task_name=task_name, limit=RELEASE_BATCH, after=after, connection=conn
                    )
                earliest: datetime | None = None
                for held in batch:
                    key = {"task_name": held.task_name, "task_instance": held.instance_id}
                    if conn.execute(self._select_one, key).first() is not None:
                        conflicts.append(held.instance_id)
                        continue
                    due = execution_time or held.execution_time
                    conn.execute(self._reinsert_statement(), self._reinsert_params(held, due, reset_failures))
                    conn.execute(sa.text(f"DELETE FROM {self.held_table} WHERE {_KEY}"), key)
                    released.append(held.instance_id)
                    earliest = due if earliest is None else min(earliest, due)
                if earliest is not None:
                    self._notify(conn, earliest)
            if instance_id is not None or len(batch) < RELEASE_BATCH:
                return released, conflicts
            after = batch[-1].key

    def _reinsert_statement(self) -> sa.TextClause:
        columns = [
            "task_name", "task_instance", "task_data", "execution_time", "picked", "version",
            "last_success", "last_failure", "consecutive_failures",
        ]  # fmt: skip
        if self.has_priority_column:
            columns.append("priority")
        values = ", ".join(f":{c}" for c in columns)
        return sa.text(f"INSERT INTO {self.table_name} ({', '.join(columns)}) VALUES ({values})")

    def _reinsert_params(self, held: HeldExecution, due: datetime, reset_failures: bool) -> dict[str, Any]:
        d = self.dialect
        return {
            "task_name": held.task_name,
            "task_instance": held.instance_id,
            "task_data": held.raw_data,
            "execution_time": d.encode_time(due),
            "picked": d.encode_bool(False),
            "version": 1,
            "last_success": d.encode_time(held.last_success),
            "last_failure": d.encode_time(held.last_failure),
            "consecutive_failures": 0 if reset_failures else held.consecutive_failures,
            "priority": held.priority,
        }

    def drop_held(self, task_name: str, instance_id: str, *, state: HoldState | None = None) -> bool:
        """Delete a held execution for good (only while held as ``state``, when given);
        whether there was one."""
        key: dict[str, str] = {"task_name": task_name, "task_instance": instance_id}
        where = _KEY
        if state is not None:
            where, key["state"] = f"{_KEY} AND state = :state", state.value
        with self.engine.begin() as conn:
            return conn.execute(sa.text(f"DELETE FROM {self.held_table} WHERE {where}"), key).rowcount == 1

    # ------------------------------------------------------------------ task pauses
    def pause_task(self, task_name: str, *, now: datetime, by: str | None, reason: str | None) -> bool:
        """Pause ``task_name`` as a whole; False when it was paused already (the first pause's
        who, when and why stay)."""
        sql = sa.text(
            f"INSERT INTO {self.pauses_table} (task_name, paused_at, paused_by, reason) "
            "VALUES (:task_name, :paused_at, :paused_by, :reason)"
        )
        params = {
            "task_name": task_name,
            "paused_at": self.dialect.encode_time(now),
            "paused_by": None if by is None else by[:MAX_ACTOR],
            "reason": bounded_reason(reason),
        }
        try:
            with self.engine.begin() as conn:
                if self._paused_row(conn, task_name):
                    return False
                conn.execute(sql, params)
                self._notify_pauses(conn, now)
        except IntegrityError:
            return False  # paused by someone else between the look and the insert
        return True

    def resume_task(self, task_name: str, *, now: datetime) -> bool:
        """Lift the pause of ``task_name``; whether it was paused."""
        with self.engine.begin() as conn:
            sql = sa.text(f"DELETE FROM {self.pauses_table} WHERE task_name = :task_name")
            lifted = conn.execute(sql, {"task_name": task_name}).rowcount == 1
            if lifted:
                self._notify_pauses(conn, now)
        return lifted

    def _paused_row(self, conn: sa.Connection, task_name: str) -> bool:
        sql = sa.text(f"SELECT 1 FROM {self.pauses_table} WHERE task_name = :task_name")
        return conn.execute(sql, {"task_name": task_name}).first() is not None

    def task_pauses(self, connection: ConnectionLike | None = None) -> list[TaskPause]:
        sql = sa.text(
            f"SELECT task_name, paused_at, paused_by, reason FROM {self.pauses_table} ORDER BY task_name"
        )
        with self._read(connection) as conn:
            rows = conn.execute(sql).all()
        return [TaskPause(r[0], self.dialect.decode_required_time(r[1]), r[2], r[3]) for r in rows]

    def paused_task_names(self) -> frozenset[str]:
        with self._reading() as conn:
            return frozenset(
                r[0] for r in conn.execute(sa.text(f"SELECT task_name FROM {self.pauses_table}"))
            )

    def _notify_pauses(self, conn: sa.Connection, now: datetime) -> None:
        # Every poller of this table on PostgreSQL reads the pauses again at once (the others
        # within one polling interval); a resumed task's due rows are then claimed right away.
        if self.notify_channel is not None:
            conn.execute(self._sql_notify, {"payload": encode_pauses_changed(now)})
