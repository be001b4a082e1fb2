"""What every part of the ``scheduled_tasks`` protocol shares: the statements prepared for one
table on one database, the connections they run on, and the mapping of rows to executions.

Statements that differ between databases come from the dialect; nothing here asks which
database it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._errors import RowLockedError, TableSchemaError, TaskDataTooLargeError
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._polling.wakeups import encode_due
from ekbatan.distributed_jobs.scheduler._table.driver_statements import DriverStatement, driver_path_available
from ekbatan.distributed_jobs.scheduler._table.retries import with_retries
from ekbatan.distributed_jobs.scheduler._table.rows import (
    COLUMNS,
    COLUMNS_WITHOUT_PRIORITY,
    ConnectionLike,
    NewExecution,
    as_connection,
)
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.dialects import SqlDialect
from ekbatan.distributed_jobs.scheduler.schema import (
    has_priority_column,
    priority_column_ddl,
    validate_table_name,
)

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.repository")


class TableAccess:
    """The statements, connections and row mapping of ``scheduled_tasks`` for one table on one
    database; :class:`~ekbatan.distributed_jobs.scheduler._table.repository.TaskRepository` adds the
    protocol on top."""

    def __init__(
        self,
        engine: sa.Engine,
        dialect: SqlDialect,
        resolver: TaskResolver,
        *,
        table_name: str = "scheduled_tasks",
        picked_by: str = "scheduler",
        priority_enabled: bool = False,
        notify_channel: str | None = None,
    ) -> None:
        self.engine = engine
        #: SQL naming the PostgreSQL channel told about every scheduled due time (a hint for pollers)
        self.notify_channel = notify_channel if dialect.supports_notify else None
        self._autocommit = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if dialect.autocommit_single_statements
            else None
        )
        self.dialect = dialect
        self.resolver = resolver
        self.table_name = validate_table_name(table_name)
        self.picked_by = picked_by[:50]
        self.priority_enabled = priority_enabled
        #: whether the table has the optional ``priority`` column; None until first looked up
        self._has_priority: bool | None = None
        #: what ``SELECT VERSION()`` said, where the version decides the polling strategy
        self.server_version: str | None = None
        self._columns_lock = threading.Lock()
        #: per thread: how long its writes wait for a row lock (unset: the database's own wait)
        self._lock_wait = threading.local()
        self._statements: dict[tuple[str, str, int], sa.TextClause] = {}
        self._prepare_statements()
        # The statements run once per execution (claim, strict delete, and scheduling one
        # execution, whose time counts in a due-now task's latency); on PostgreSQL they may
        # skip SQLAlchemy.
        per_execution = [self._sql_pick, self._sql_remove]
        if self._sql_insert_and_notify is not None:
            per_execution.append(self._sql_insert_and_notify)
        self._direct: dict[sa.TextClause, DriverStatement] = (
            {sql: DriverStatement(engine, sql.text) for sql in per_execution}
            if driver_path_available(engine)
            else {}
        )

    # ------------------------------------------------------------------ statements
    def _prepare_statements(self) -> None:
        t = self.table_name
        self._order_due = self.dialect.priority_order() if self.priority_enabled else "execution_time ASC"
        columns = ["task_name", "task_instance", "task_data", "execution_time", "picked", "version"]
        if self.priority_enabled:
            columns.append("priority")
        self._insert_columns = tuple(columns)
        # every value a placeholder: PyMySQL folds an executemany into one multi-row INSERT only then
        values = ", ".join(f":{c}" for c in columns)
        plain_insert = f"INSERT INTO {t} ({', '.join(columns)}) VALUES ({values})"
        self._sql_insert = sa.text(plain_insert)
        self._sql_insert_many = self.dialect.insert_many(t, self._insert_columns)
        if_absent = self.dialect.insert_if_absent(plain_insert)
        self._sql_insert_if_absent = None if if_absent is None else sa.text(if_absent)
        self._sql_pick = sa.text(
            f"UPDATE {t} SET picked = :true, picked_by = :picked_by, last_heartbeat = :now, "
            "version = version + 1 WHERE picked = :false AND task_name = :task_name "
            "AND task_instance = :task_instance AND version = :version"
        )
        self._sql_heartbeat = sa.text(
            f"UPDATE {t} SET last_heartbeat = :now WHERE task_name = :task_name "
            "AND task_instance = :task_instance AND version = :version"
        )
        self._sql_remove = sa.text(
            f"DELETE FROM {t} WHERE task_name = :task_name AND task_instance = :task_instance "
            "AND version = :version"
        )
        reschedule_head = f"UPDATE {t} SET execution_time = :execution_time, "
        reschedule_tail = (
            "picked = :false, picked_by = NULL, last_success = :last_success, last_failure = :last_failure, "
            "consecutive_failures = :consecutive_failures, last_heartbeat = NULL, version = :new_version "
            "WHERE task_name = :task_name AND task_instance = :task_instance AND version = :version"
        )
        self._sql_reschedule = sa.text(reschedule_head + reschedule_tail)
        self._sql_reschedule_data = sa.text(reschedule_head + "task_data = :task_data, " + reschedule_tail)
        self._sql_replace = sa.text(
            f"UPDATE {t} SET task_name = :new_task_name, task_instance = :new_task_instance, picked = :false, "
            "picked_by = NULL, last_heartbeat = NULL, last_success = NULL, last_failure = NULL, "
            "consecutive_failures = 0, execution_time = :execution_time, task_data = :task_data, version = 1 "
            "WHERE task_name = :task_name AND task_instance = :task_instance AND version = :version"
        )
        self._sql_unpick = sa.text(
            f"UPDATE {t} SET picked = :false, picked_by = NULL, version = version + 1 WHERE picked = :true "
            "AND version = :version AND task_name = :task_name AND task_instance = :task_instance"
        )
        self._sql_delete_task = sa.text(f"DELETE FROM {t} WHERE task_name = :task_name")
        claim_set = "SET picked = :true, picked_by = :picked_by, last_heartbeat = :now, version = version + 1"
        self._sql_claim_keys = sa.text(f"UPDATE {t} {claim_set} WHERE (task_name, task_instance) IN :keys")
        # One key spelled as equalities: MariaDB answers a one-element row-value IN with a scan
        # of the whole primary key, a cost per claim that grows with the table.
        self._sql_claim_key = sa.text(
            f"UPDATE {t} {claim_set} WHERE task_name = :task_name AND task_instance = :task_instance"
        )
        self._sql_insert_and_notify: sa.TextClause | None = None
        self._sql_get: sa.TextClause | None = None  # these name the columns: built once they are known
        self._claim_notified: DriverStatement | None = None
        key = "task_name = :task_name AND task_instance = :task_instance"
        if self.notify_channel is not None:
            # Undoes that claim when its outcome is unknown (the connection broke around the
            # commit): the heartbeat it set, to the microsecond, tells this claim from any other.
            self._sql_release_notified = sa.text(
                f"UPDATE {t} SET picked = :false, picked_by = NULL, last_heartbeat = NULL, version = version + 1 "
                f"WHERE {key} AND picked = :true AND picked_by = :picked_by AND last_heartbeat = :now"
            )
            self._sql_notify = sa.text(self.dialect.notify(self.notify_channel))
            self._sql_insert_and_notify = sa.text(
                self.dialect.insert_and_notify(plain_insert, self.notify_channel)
            )
        self._sql_remove_many = self.dialect.remove_many(t)

    # ------------------------------------------------------------------ the priority column
    @property
    def columns(self) -> str:
        """The select list of a row: db-scheduler's columns, ``priority`` as NULL when the table
        was created without it (looked up on first use, then kept)."""
        if self._has_priority is None:
            self.detect_columns()
        return COLUMNS if self._has_priority else COLUMNS_WITHOUT_PRIORITY

    @property
    def has_priority_column(self) -> bool:
        if self._has_priority is None:
            self.detect_columns()
        return bool(self._has_priority)

    def detect_columns(self) -> bool:
        """Look up whether the table has the optional ``priority`` column, once; refuse priority
        ordering on a table without it, giving the DDL that adds it. Whether it has it."""
        with self._columns_lock:
            if self._has_priority is not None:
                return self._has_priority
            with self._reading() as conn:
                present = has_priority_column(conn, self.table_name)
            if not present and self.priority_enabled:
                ddl = ";\n".join(priority_column_ddl(self.dialect, self.table_name))
                raise TableSchemaError(
                    f"priority ordering is enabled, but table {self.table_name} has no priority column "
                    f"(db-scheduler's DDL calls it optional); add it ({self.dialect.name}):\n{ddl};\n"
                    "or leave out enable_priority()"
                )
            if not present:
                log.info(
                    "table %s has no priority column: executions run and list without priorities",
                    self.table_name,
                )
            self._prepare_row_statements(COLUMNS if present else COLUMNS_WITHOUT_PRIORITY)
            self._has_priority = present
            return present

    def detect_columns_if_reachable(self, who: str) -> None:
        """:meth:`detect_columns` now, so that ``enable_priority()`` on a table without the
        column fails at start; with the database unreachable, the first statement that needs
        it looks it up instead."""
        try:
            self.detect_columns()
        except TableSchemaError:
            raise
        except sa.exc.SQLAlchemyError as exc:
            log.info(
                "%s: cannot read the columns of %s yet (%s); looked up again on first use",
                who,
                self.table_name,
                type(exc).__name__,
            )

    def _prepare_row_statements(self, columns: str) -> None:
        t = self.table_name
        key = "task_name = :task_name AND task_instance = :task_instance"
        self._sql_get = sa.text(f"SELECT {columns} FROM {t} WHERE {key}")
        if self.notify_channel is not None and driver_path_available(self.engine):
            # A claim of one execution a notification named. It reads the row as it claims it,
            # so unlike a fetch-mode claim it needs no version read beforehand: under the row
            # lock the picked/due test and the claim are one step. SKIP LOCKED: a row someone
            # else holds (another claimer, a caller's transaction) is theirs to settle, and the
            # listening thread never waits on it.
            self._claim_notified = DriverStatement(
                self.engine, self.dialect.claim_one_locked(t, columns, key)
            )

    @property
    def _select_one(self) -> sa.TextClause:
        if self._sql_get is None:
            self.detect_columns()
        assert self._sql_get is not None
        return self._sql_get

    def _notify(self, conn: sa.Connection, when: datetime) -> None:
        # Inside the scheduling transaction: delivered on commit, dropped on rollback.
        if self.notify_channel is not None:
            conn.execute(self._sql_notify, {"payload": encode_due(when)})

    def _statement(self, kind: str, clause: str, limit: int, build: Callable[[], str]) -> sa.TextClause:
        """The polling statements vary only with the unresolved names and the limit: build each
        variant once (the set is small and bounded) instead of on every poll."""
        key = (kind, clause, limit)
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = sa.text(build())
        return statement

    def _not_in_unresolved(self) -> tuple[str, dict[str, Any]]:
        return self._not_in(self.resolver.unresolved_names())

    def _not_in_excluded(self) -> tuple[str, dict[str, Any]]:
        """`` AND task_name NOT IN (…)`` of the names a poll passes over: unknown or paused."""
        return self._not_in(self.resolver.excluded_names())

    @staticmethod
    def _not_in(names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
        if not names:
            return "", {}
        placeholders = ", ".join(f":u{i}" for i in range(len(names)))
        return f" AND task_name NOT IN ({placeholders})", {f"u{i}": n for i, n in enumerate(names)}

    # ------------------------------------------------------------------ connections
    @contextmanager
    def _tx(
        self, connection: ConnectionLike | None = None, *, single: bool = False
    ) -> Iterator[sa.Connection]:
        """The caller's connection (never committed here), else a fresh committed transaction.

        ``single``: the block runs exactly one statement, which may then autocommit.
        """
        if connection is not None:
            yield as_connection(connection)
            return
        with self._one() if single else self._begin() as conn:
            yield conn

    def _one(self) -> AbstractContextManager[sa.Connection]:
        """A connection for one statement, committed on success.

        On PostgreSQL that is an autocommit connection: psycopg would otherwise spend two extra
        round trips (BEGIN, COMMIT) around every single-statement write.
        """
        if self._autocommit is not None and self._lock_wait_bound() is None:
            return self._autocommit.connect()
        return self._begin()

    def _begin(self) -> AbstractContextManager[sa.Connection]:
        """A transaction committed on success; bounded in its lock waits inside
        :meth:`bounded_lock_wait`."""
        seconds = self._lock_wait_bound()
        return self.engine.begin() if seconds is None else self._bounded_transaction(seconds)

    def _lock_wait_bound(self) -> float | None:
        return getattr(self._lock_wait, "seconds", None)

    @contextmanager
    def bounded_lock_wait(self, seconds: float) -> Iterator[None]:
        """Inside the block, this thread's writes of their own transaction wait at most
        ``seconds`` for a row lock another transaction holds, then raise
        :class:`~ekbatan.distributed_jobs.scheduler._errors.RowLockedError` (not tried again).

        For the writes that must not queue behind a process frozen in the middle of its own
        write (SIGSTOP, a paused VM: its row stays locked until its connection dies): the
        dead-execution pass, which would otherwise wait there and revive nothing else.
        """
        previous = self._lock_wait_bound()
        self._lock_wait.seconds = seconds
        try:
            yield
        finally:
            self._lock_wait.seconds = previous

    @contextmanager
    def _bounded_transaction(self, seconds: float) -> Iterator[sa.Connection]:
        setup, reset = self.dialect.bounded_lock_wait(seconds)
        with self.engine.connect() as conn:
            try:
                with conn.begin():
                    if setup is not None:
                        conn.exec_driver_sql(setup)
                    yield conn
            except sa.exc.DBAPIError as error:
                if self.dialect.is_lock_timeout(error):
                    raise RowLockedError(
                        f"a row this write needs stayed locked by another transaction for more than "
                        f"{seconds:g}s (the process holding it may be frozen in the middle of a write)"
                    ) from error
                raise
            finally:
                if reset is not None and not conn.invalidated:
                    try:
                        conn.exec_driver_sql(reset)
                        conn.commit()
                    except sa.exc.DBAPIError:
                        # a session left with the short wait must not go back to the pool
                        conn.invalidate()

    def _single_rowcount(self, statement: sa.TextClause, params: dict[str, Any]) -> int:
        """Run one single-statement write in its own commit; its row count. A write the database
        aborted for a deadlock (or SQLite's busy lock) is tried again: the abort undid it whole."""
        driver = self._direct.get(statement)
        if driver is not None and driver.usable and self._lock_wait_bound() is None:
            return with_retries(lambda: driver.rowcount(params))

        def write() -> int:
            with self._one() as conn:
                return conn.execute(statement, params).rowcount

        return with_retries(write)

    def _rowcount(
        self, statement: sa.TextClause, params: dict[str, Any], connection: ConnectionLike | None
    ) -> int:
        """One write's row count: in the caller's transaction, else in its own commit."""
        if connection is not None:
            return as_connection(connection).execute(statement, params).rowcount
        return self._single_rowcount(statement, params)

    @contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        if self._autocommit is not None:
            with self._autocommit.connect() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            yield conn
            conn.rollback()

    # ------------------------------------------------------------------ row mapping
    def _execution(self, row: Sequence[Any]) -> Execution:
        d = self.dialect
        return Execution(
            task_name=row[0],
            instance_id=row[1],
            raw_data=d.decode_bytes(row[2]),
            execution_time=d.decode_required_time(row[3]),
            picked=d.decode_bool(row[4]),
            picked_by=row[5],
            last_success=d.decode_time(row[6]),
            last_failure=d.decode_time(row[7]),
            consecutive_failures=row[8] or 0,
            last_heartbeat=d.decode_time(row[9]),
            version=int(row[10]),
            priority=row[11],
        )

    def _resolved(self, rows: Sequence[Sequence[Any]]) -> list[Execution]:
        """Map rows, dropping (and recording) those whose task this process does not know."""
        executions = []
        for row in rows:
            execution = self._execution(row)
            if self.resolver.resolve(execution.task_name) is None:
                self.resolver.add_unresolved(execution.task_name, execution.execution_time)
                continue
            executions.append(execution)
        return executions

    def _check_data(self, task_name: str, instance_id: str, raw: bytes | None) -> None:
        limit = self.dialect.max_task_data_bytes
        if raw is not None and limit is not None and len(raw) > limit:
            raise TaskDataTooLargeError(
                f"the task data of {task_name}/{instance_id} is {len(raw):,} bytes encoded, more than "
                f"the {limit:,} that {self.dialect.task_data_column} holds on {self.dialect.name}; "
                "store large payloads elsewhere and put a reference (a key, a URL) in the task data",
                task_name,
                instance_id,
            )

    def _insert_params(self, new: NewExecution) -> dict[str, Any]:
        self._check_data(new.task_name, new.instance_id, new.raw_data)
        if self.priority_enabled and self._has_priority is None:
            self.detect_columns()  # the insert names the column: refuse a table without it clearly
        return {
            "task_name": new.task_name,
            "task_instance": new.instance_id,
            "task_data": new.raw_data,
            "execution_time": self.dialect.encode_time(new.execution_time),
            "picked": self.dialect.encode_bool(False),
            "version": 1,
            "priority": new.priority,
        }

    def _known_names(self, *, paused_too: bool = False) -> tuple[str, dict[str, Any]]:
        """`` AND task_name IN (…)`` of the tasks this process can run now: known, not paused
        (a condition nothing meets when every one is paused); ``paused_too``: every known one."""
        names = tuple(sorted(self.resolver.tasks)) if paused_too else self.resolver.claimable_names()
        if not names:
            return " AND 1 = 0", {}
        placeholders = ", ".join(f":k{i}" for i in range(len(names)))
        condition = self.dialect.without_estimate(f"task_name IN ({placeholders})")
        return f" AND {condition}", {f"k{i}": n for i, n in enumerate(names)}

    @contextmanager
    def _read(self, connection: ConnectionLike | None) -> Iterator[sa.Connection]:
        if connection is not None:
            yield as_connection(connection)
            return
        with self._reading() as conn:
            yield conn
