"""The engine's one door to ``scheduled_tasks``: every statement it runs there goes through this
class, built in this package (claims, completions, listings) with what differs per dialect in
``dialects/``.

Each state-changing write is conditioned on the ``version`` the caller read and bumps it
(heartbeats check it but never bump it), which is what keeps a stalled instance from
recording a result after its execution was revived elsewhere. Timestamps always come from
the application clock, bound through the dialect's encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ekbatan.distributed_jobs.scheduler._errors import FailedToScheduleBatchError, TaskInstanceError
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._polling.wakeups import encode_scheduled
from ekbatan.distributed_jobs.scheduler._table.claims import Claims
from ekbatan.distributed_jobs.scheduler._table.completions import Completions
from ekbatan.distributed_jobs.scheduler._table.holds import Holds
from ekbatan.distributed_jobs.scheduler._table.listing import ScheduledExecutionsFilter, TaskSummary
from ekbatan.distributed_jobs.scheduler._table.rows import ConnectionLike, NewExecution


class TaskRepository(Claims, Completions, Holds):
    """The SQL protocol of ``scheduled_tasks`` for one table on one database: scheduling here,
    claiming and completing in the classes it is made of."""

    # ------------------------------------------------------------------ scheduling
    def create_if_not_exists(self, new: NewExecution, connection: ConnectionLike | None = None) -> bool:
        """Insert unless ``(task_name, task_instance)`` exists; return whether it inserted."""
        params = self._insert_params(new)
        if self._sql_insert_if_absent is not None:
            # One statement — the notification rides along on PostgreSQL — so it can autocommit.
            # Its row count is 1 when it inserted (and notified), 0 when the row existed.
            statement = self._sql_insert_if_absent
            if self._sql_insert_and_notify is not None:
                statement = self._sql_insert_and_notify
                params["payload"] = encode_scheduled(new.execution_time, new.task_name, new.instance_id)
            return self._rowcount(statement, params, connection) == 1
        select = self._select_one  # before the connection is taken: see get_execution
        with self._tx(connection) as conn:
            if conn.execute(select, params).first() is not None:
                return False
            try:
                conn.execute(self._sql_insert, params)
                return True
            except IntegrityError as exc:
                # Lost the race to another inserter. Under REPEATABLE READ (MySQL's default) a
                # re-read sees this transaction's snapshot, taken before the winner committed,
                # so the server's duplicate-key error is the evidence.
                if self.dialect.is_duplicate_key(exc) or conn.execute(select, params).first() is not None:
                    return False
                raise TaskInstanceError(
                    f"failed to schedule {new.task_name}/{new.instance_id}: {exc.orig}",
                    new.task_name,
                    new.instance_id,
                ) from exc

    def create_batch(self, batch: Sequence[NewExecution], connection: ConnectionLike | None = None) -> None:
        """Insert all rows in one transaction; any existing key fails the whole batch."""
        if not batch:
            return
        try:
            rows = [self._insert_params(n) for n in batch]
            with self._tx(connection) as conn:
                if self._sql_insert_many is not None and len(rows) > 1:
                    params = self.dialect.insert_many_params(self._insert_columns, rows)
                    conn.execute(self._sql_insert_many, params)
                else:
                    conn.execute(self._sql_insert, rows)
                self._notify(conn, min(n.execution_time for n in batch))
        except IntegrityError as exc:
            raise FailedToScheduleBatchError(
                f"failed to schedule a batch of {len(batch)} executions (first: "
                f"{batch[0].task_name}/{batch[0].instance_id}); one of them probably exists already: "
                f"{exc.orig}"
            ) from exc

    # ------------------------------------------------------------------ housekeeping
    def get_dead_executions(self, older_than: datetime) -> list[Execution]:
        clause, extra = self._not_in_unresolved()
        sql = sa.text(
            f"SELECT {self.columns} FROM {self.table_name} WHERE picked = :true AND last_heartbeat <= :older_than"
            f"{clause} ORDER BY last_heartbeat ASC"
        )
        params = {
            "true": self.dialect.encode_bool(True),
            "older_than": self.dialect.encode_time(older_than),
            **extra,
        }
        with self._reading() as conn:
            rows = conn.execute(sql, params).all()
        return self._resolved(rows)

    def get_executions_failing_longer_than(self, since: datetime) -> list[Execution]:
        clause, extra = self._not_in_unresolved()
        sql = sa.text(
            f"SELECT {self.columns} FROM {self.table_name} WHERE consecutive_failures > 0 "
            f"AND (last_success IS NULL OR last_success < :since){clause}"
        )
        with self._reading() as conn:
            rows = conn.execute(sql, {"since": self.dialect.encode_time(since), **extra}).all()
        return self._resolved(rows)

    def delete_unresolved(self, task_name: str) -> int:
        with self._one() as conn:
            return conn.execute(self._sql_delete_task, {"task_name": task_name}).rowcount

    # ------------------------------------------------------------------ reads for the client
    def get_execution(
        self, task_name: str, instance_id: str, connection: ConnectionLike | None = None
    ) -> Execution | None:
        # Resolved before a connection is taken: the first use looks the table's columns up on
        # a connection of its own, which a pool of one would never hand out while this one waits.
        select = self._select_one
        with self._read(connection) as conn:
            rows = conn.execute(select, {"task_name": task_name, "task_instance": instance_id}).all()
        if len(rows) > 1:
            raise TaskInstanceError(
                f"found {len(rows)} rows for {task_name}/{instance_id}; the primary key is missing",
                task_name,
                instance_id,
            )
        return self._execution(rows[0]) if rows else None

    def get_scheduled_executions(
        self,
        filter: ScheduledExecutionsFilter,
        task_name: str | None = None,
        connection: ConnectionLike | None = None,
    ) -> list[Execution]:
        d = self.dialect
        conditions: list[str] = []
        params: dict[str, Any] = {}
        if filter.picked is not None:
            conditions.append("picked = :picked")
            params["picked"] = d.encode_bool(filter.picked)
        if filter.after is not None:
            conditions.append(
                "(execution_time >= :after_time AND (execution_time > :after_time OR task_instance > :after_id))"
            )
            params["after_time"] = d.encode_time(filter.after.execution_time)
            params["after_id"] = filter.after.instance_id
        if filter.before is not None:
            conditions.append(
                "(execution_time <= :before_time AND (execution_time < :before_time OR task_instance < :before_id))"
            )
            params["before_time"] = d.encode_time(filter.before.execution_time)
            params["before_id"] = filter.before.instance_id
        if not filter.include_unresolved:
            clause, extra = self._not_in_unresolved()
            if clause:
                conditions.append(clause.removeprefix(" AND "))
                params.update(extra)
        if task_name is not None:
            conditions.append("task_name = :task_name")
            params["task_name"] = task_name
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        order = "execution_time ASC, task_instance ASC"
        if filter.before is not None and filter.after is None:
            order = "execution_time DESC, task_instance DESC"
        limit = d.limit(filter.limit) if filter.limit else ""
        sql = sa.text(f"SELECT {self.columns} FROM {self.table_name}{where} ORDER BY {order}{limit}")
        with self._read(connection) as conn:
            return [self._execution(r) for r in conn.execute(sql, params).all()]

    def summary_by_task(
        self, connection: ConnectionLike | None = None, due_at: datetime | None = None
    ) -> list[TaskSummary]:
        """Per task name, in one pass over the table; with ``due_at`` also how many are due then
        (not picked, execution time not after it)."""
        due = (
            ", SUM(CASE WHEN picked = :false AND execution_time <= :due_at THEN 1 ELSE 0 END)"
            if due_at is not None
            else ""
        )
        sql = sa.text(
            "SELECT task_name, COUNT(*), "
            "SUM(CASE WHEN picked = :true THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN picked = :false AND COALESCE(consecutive_failures, 0) > 0 THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN picked = :false AND COALESCE(consecutive_failures, 0) = 0 THEN 1 ELSE 0 END), "
            f"MIN(execution_time), MAX(last_success), MAX(last_failure), MAX(consecutive_failures){due} "
            f"FROM {self.table_name} GROUP BY task_name ORDER BY task_name"
        )
        d = self.dialect
        params = {"true": d.encode_bool(True), "false": d.encode_bool(False)}
        if due_at is not None:
            params["due_at"] = d.encode_time(due_at)
        with self._read(connection) as conn:
            rows = conn.execute(sql, params).all()
        return [
            TaskSummary(
                task_name=r[0],
                instance_count=int(r[1]),
                running_count=int(r[2] or 0),
                failing_count=int(r[3] or 0),
                scheduled_count=int(r[4] or 0),
                earliest_execution_time=d.decode_time(r[5]),
                last_success=d.decode_time(r[6]),
                last_failure=d.decode_time(r[7]),
                max_consecutive_failures=int(r[8] or 0),
                due_count=None if due_at is None else int(r[9] or 0),
            )
            for r in rows
        ]
