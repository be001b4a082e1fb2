from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect

#: the element type of each insertable column, as db-scheduler's PostgreSQL DDL declares it
_ARRAY_TYPES = {
    "task_name": "text",
    "task_instance": "text",
    "task_data": "bytea",
    "execution_time": "timestamptz",
    "picked": "boolean",
    "version": "bigint",
    "priority": "smallint",
}


class PostgreSqlDialect(SqlDialect):
    """``timestamptz`` columns bound as aware UTC datetimes; single-statement lock-and-fetch."""

    dialect: ClassVar[Dialect] = Dialect.POSTGRESQL
    supports_lock_and_fetch = True
    # psycopg would otherwise spend two extra round trips (BEGIN, COMMIT) around every
    # single-statement write
    autocommit_single_statements = True
    supports_notify = True

    def bounded_lock_wait(self, seconds: float) -> tuple[str | None, str | None]:
        # SET LOCAL ends with the transaction: nothing to put back on the pooled connection
        return f"SET LOCAL lock_timeout = '{max(1, int(seconds * 1000))}ms'", None

    def is_lock_timeout(self, error: BaseException) -> bool:
        return getattr(getattr(error, "orig", None), "sqlstate", None) == "55P03"  # lock_not_available

    def without_estimate(self, condition: str) -> str:
        # The claims keep the task names this process knows. On a table not analysed since a
        # bulk insert (autovacuum gets to it a minute or more later), the planner guesses that
        # an equality on a column matches 0.5 % of the rows: it takes the 100,000 due rows for
        # 31, so it bitmap-ANDs the primary key (which leads with task_name) with
        # execution_time_idx, or for a claim of more than 31 rows bitmap-scans every due row,
        # and sorts them all to return the first few: 50–200 ms per claim instead of 0.05 ms,
        # a cost that grows with the backlog. Inside COALESCE the condition is neither an
        # index condition nor an estimated one (the planner takes it to keep half the rows),
        # so the one plan left is the one that does not grow: walk execution_time_idx in
        # order and stop at the limit, db-scheduler's own access path.
        return f"COALESCE({condition}, false)"

    def lock_and_fetch_select_tail(self, n: int) -> str:
        return f" FOR UPDATE SKIP LOCKED LIMIT {int(n)}"

    def notify(self, channel: str) -> str:
        return f"SELECT pg_notify({channel}, :payload)"

    def insert_and_notify(self, insert: str, channel: str) -> str:
        return (
            f"WITH inserted AS ({insert} ON CONFLICT (task_name, task_instance) DO NOTHING RETURNING 1) "
            f"SELECT pg_notify({channel}, :payload) FROM inserted"
        )

    def insert_many(self, table: str, columns: Sequence[str]) -> sa.TextClause | None:
        # One array per column: one statement and one round trip for the whole batch. An
        # executemany sends a statement per row through psycopg's pipeline, about 0.1 ms of
        # Python per row, which made scheduling cost more CPU than running trivial tasks.
        arrays = ", ".join(f"CAST(:{c} AS {_ARRAY_TYPES[c]}[])" for c in columns)
        return sa.text(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM unnest({arrays})")

    def insert_many_params(self, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {c: [row[c] for row in rows] for c in columns}

    def remove_many(self, table: str) -> sa.TextClause:
        # three arrays: one statement text whatever the batch size
        return sa.text(
            f"DELETE FROM {table} WHERE (task_name, task_instance, version) IN "
            "(SELECT * FROM unnest(CAST(:names AS text[]), CAST(:instances AS text[]), CAST(:versions AS bigint[]))) "
            "RETURNING task_name, task_instance"
        )

    def remove_many_params(self, keys: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
        return {
            "names": [k[0] for k in keys],
            "instances": [k[1] for k in keys],
            "versions": [k[2] for k in keys],
        }

    def lock_and_fetch_claim(
        self, table: str, columns: str, condition: str, order: str, n: int
    ) -> str | None:
        return (
            f"WITH locked AS (UPDATE {table} st1 SET picked = :true, picked_by = :picked_by, "
            "last_heartbeat = :now, version = version + 1 "
            f"WHERE (st1.task_name, st1.task_instance) IN (SELECT st2.task_name, st2.task_instance FROM {table} st2 "
            f"WHERE {condition} ORDER BY {order}"
            f"{self.lock_and_fetch_select_tail(n)}) RETURNING st1.*) "
            f"SELECT {columns} FROM locked ORDER BY {order}"
        )

    def claim_one_locked(self, table: str, columns: str, key: str) -> str:
        return (
            f"UPDATE {table} SET picked = :true, picked_by = :picked_by, last_heartbeat = :now, "
            f"version = version + 1 WHERE (task_name, task_instance) IN (SELECT task_name, "
            f"task_instance FROM {table} WHERE {key} AND picked = :false AND execution_time <= :now "
            f"FOR UPDATE SKIP LOCKED) RETURNING {columns}"
        )
