"""Recording what became of a claimed execution: deleted, rescheduled, replaced by another,
or still alive (its heartbeat). Each write is conditioned on the version the claim read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._table.access import TableAccess
from ekbatan.distributed_jobs.scheduler._table.retries import with_retries
from ekbatan.distributed_jobs.scheduler._table.rows import (
    KEEP_DATA,
    ConnectionLike,
    check_key,
    expect_one_row,
    versioned_key,
)


class Completions(TableAccess):
    """The completing half of the protocol."""

    def remove(self, execution: Execution, connection: ConnectionLike | None = None) -> None:
        count = self._rowcount(self._sql_remove, versioned_key(execution), connection)
        expect_one_row(count, "remove", execution)

    def remove_many(self, executions: Sequence[Execution]) -> set[tuple[str, str]]:
        """Delete each execution at its version in one transaction; return the keys deleted."""
        if len(executions) == 1:
            e = executions[0]
            count = self._single_rowcount(self._sql_remove, versioned_key(e))
            return {(e.task_name, e.instance_id)} if count == 1 else set()
        return with_retries(lambda: self._remove_many(executions))

    def _remove_many(self, executions: Sequence[Execution]) -> set[tuple[str, str]]:
        if self.dialect.supports_delete_returning:
            start = self.dialect.claim_transaction_start()
            with self._one() as conn:
                if start is not None:
                    # MariaDB reads a row-value IN list by scanning the table, not the key
                    # (always for one key, on a small table for several). Under REPEATABLE READ
                    # the scan keeps every row it passed locked until the commit, and a
                    # lock-and-fetch claim meanwhile skips the due rows this delete never touches.
                    conn.exec_driver_sql(start)
                keys = [(e.task_name, e.instance_id, e.version) for e in executions]
                rows = conn.execute(self._sql_remove_many, self.dialect.remove_many_params(keys))
                return {(r[0], r[1]) for r in rows}
        removed = set()
        with self.engine.begin() as conn:
            for e in executions:
                params = versioned_key(e)
                if conn.execute(self._sql_remove, params).rowcount == 1:
                    removed.add((e.task_name, e.instance_id))
        return removed

    def reschedule(
        self,
        execution: Execution,
        next_time: datetime,
        *,
        last_success: datetime | None,
        last_failure: datetime | None,
        consecutive_failures: int,
        new_data: Any = KEEP_DATA,
        connection: ConnectionLike | None = None,
        notify: bool = False,
    ) -> None:
        """Move the row to ``next_time``, unpicked, with the given bookkeeping.

        ``new_data`` (already encoded bytes, or None for SQL NULL) replaces ``task_data``;
        leave it out to keep the stored data.
        """
        d = self.dialect
        params = {
            "execution_time": d.encode_time(next_time),
            "false": d.encode_bool(False),
            "last_success": d.encode_time(last_success),
            "last_failure": d.encode_time(last_failure),
            "consecutive_failures": consecutive_failures or 0,
            "new_version": execution.version + 1,
            "task_name": execution.task_name,
            "task_instance": execution.instance_id,
            "version": execution.version,
        }
        sql = self._sql_reschedule
        if new_data is not KEEP_DATA:
            self._check_data(execution.task_name, execution.instance_id, new_data)
            sql = self._sql_reschedule_data
            params["task_data"] = new_data

        def update() -> int:
            with self._tx(connection, single=not notify) as conn:
                updated = conn.execute(sql, params).rowcount
                if notify and updated == 1:
                    self._notify(conn, next_time)
            return updated

        count = update() if connection is not None else with_retries(update)
        expect_one_row(count, "reschedule", execution)

    def replace(
        self,
        execution: Execution,
        new_task_name: str,
        new_instance_id: str,
        execution_time: datetime,
        raw_data: bytes | None,
    ) -> None:
        """Turn the row into a new execution (another key), version reset to 1."""
        check_key(new_task_name, new_instance_id)
        self._check_data(new_task_name, new_instance_id, raw_data)
        with self._one() as conn:
            count = conn.execute(
                self._sql_replace,
                {
                    "new_task_name": new_task_name,
                    "new_task_instance": new_instance_id,
                    "false": self.dialect.encode_bool(False),
                    "execution_time": self.dialect.encode_time(execution_time),
                    "task_data": raw_data,
                    "task_name": execution.task_name,
                    "task_instance": execution.instance_id,
                    "version": execution.version,
                },
            ).rowcount
        expect_one_row(count, "replace", execution)

    def update_heartbeat(self, execution: Execution, now: datetime) -> bool:
        """Refresh ``last_heartbeat`` if the row is still at the version we claimed."""
        with self._one() as conn:
            return (
                conn.execute(
                    self._sql_heartbeat,
                    {
                        "now": self.dialect.encode_time(now),
                        "task_name": execution.task_name,
                        "task_instance": execution.instance_id,
                        "version": execution.version,
                    },
                ).rowcount
                == 1
            )
