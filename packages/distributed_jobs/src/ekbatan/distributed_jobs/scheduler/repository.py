"""Every statement the engine runs against ``scheduled_tasks``, in one place.

Each state-changing write is conditioned on the ``version`` the caller read and bumps it
(heartbeats check it but never bump it), which is what keeps a stalled instance from
recording a result after its execution was revived elsewhere. Timestamps always come from
the application clock, bound through the dialect's encoding.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from ekbatan.distributed_jobs.scheduler.dialects import Dialect, SqlDialect
from ekbatan.distributed_jobs.scheduler.driver_statements import DriverStatement, driver_path_available
from ekbatan.distributed_jobs.scheduler.errors import (
    ExecutionError,
    FailedToScheduleBatchError,
    TableSchemaError,
    TaskDataTooLargeError,
    TaskInstanceError,
    TaskKeyTooLongError,
)
from ekbatan.distributed_jobs.scheduler.execution import MAX_KEY_LENGTH, Execution, TaskInstanceId
from ekbatan.distributed_jobs.scheduler.listing import ScheduledExecutionsFilter, TaskSummary
from ekbatan.distributed_jobs.scheduler.schema import (
    has_priority_column,
    priority_column_ddl,
    validate_table_name,
)
from ekbatan.distributed_jobs.scheduler.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.wakeups import encode_due, encode_scheduled

log = logging.getLogger(__name__)

T = TypeVar("T")

COLUMNS = (
    "task_name, task_instance, task_data, execution_time, picked, picked_by, last_success, "
    "last_failure, consecutive_failures, last_heartbeat, version, priority"
)
#: the same row shape from a table created without db-scheduler's optional ``priority`` column
COLUMNS_WITHOUT_PRIORITY = COLUMNS.removesuffix("priority") + "NULL"

#: A caller-supplied place to run statements: a Connection, or an ORM Session.
ConnectionLike = Any

_KEEP: Any = object()

#: MySQL/MariaDB ``ER_DUP_ENTRY``
_ER_DUP_ENTRY = 1062


def _is_duplicate_key(exc: IntegrityError) -> bool:
    args = getattr(exc.orig, "args", ())
    return bool(args) and args[0] == _ER_DUP_ENTRY


def check_key(task_name: str, instance_id: str) -> None:
    """Refuse a key the ``scheduled_tasks`` table cannot hold, naming it and the limit."""
    for what, value in (("task name", task_name), ("instance id", instance_id)):
        if len(value) > MAX_KEY_LENGTH:
            raise TaskKeyTooLongError(
                f"{what} {value[:40]!r}… is {len(value)} characters, more than the {MAX_KEY_LENGTH} the "
                f"scheduled_tasks key columns hold; use a shorter {what} (e.g. a hash or a database id "
                "of the thing it names) and keep the details in the task data",
                task_name,
                instance_id,
            )


class NewExecution:
    """A row to insert; its key is checked against :data:`MAX_KEY_LENGTH` here."""

    __slots__ = ("execution_time", "instance_id", "priority", "raw_data", "task_name")

    def __init__(
        self,
        task_name: str,
        instance_id: str,
        execution_time: datetime,
        raw_data: bytes | None = None,
        priority: int | None = None,
    ) -> None:
        check_key(task_name, instance_id)
        self.task_name = task_name
        self.instance_id = instance_id
        self.execution_time = execution_time
        self.raw_data = raw_data
        self.priority = priority


#: attempts for the engine's own writes that lose to a deadlock or a busy lock
WRITE_ATTEMPTS = 3


def is_transient(error: BaseException) -> bool:
    """A write the database rolled back for reasons of concurrency, safe to try again."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "sqlstate", None) in ("40P01", "40001"):  # PostgreSQL deadlock, serialization
        return True
    code = orig.args[0] if orig is not None and getattr(orig, "args", None) else None
    if code in (1213, 1205):  # MySQL/MariaDB deadlock, lock wait timeout
        return True
    return "database is locked" in str(orig)  # SQLite busy beyond busy_timeout


def with_retries(write: Callable[[], T]) -> T:
    """Run ``write``; when the database rolled it back for a deadlock, run it again (the
    rollback undid it entirely, so this cannot apply it twice)."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return write()
        except DBAPIError as exc:
            if attempt == WRITE_ATTEMPTS or not is_transient(exc):
                raise
            log.info("write rolled back by the database (%s); retrying", exc.orig)
            time.sleep(0.005 * attempt)
    raise AssertionError("unreachable")


def versioned_key(execution: Execution) -> dict[str, Any]:
    """Bind parameters naming a row at the version the caller read."""
    return {
        "task_name": execution.task_name,
        "task_instance": execution.instance_id,
        "version": execution.version,
    }


def expect_one_row(count: int, what: str, execution: Execution) -> None:
    """A versioned write must hit exactly its row; anything else means another writer won."""
    if count != 1:
        raise ExecutionError(
            f"expected to {what} 1 row, changed {count}; another writer changed it first",
            execution.task_name,
            execution.instance_id,
            execution.version,
        )


def as_connection(connection: ConnectionLike) -> sa.Connection:
    """Accept a Core ``Connection`` or an ORM ``Session`` (its current connection)."""
    if isinstance(connection, sa.Connection):
        return connection
    if hasattr(connection, "connection") and callable(connection.connection):
        return connection.connection()
    raise TypeError(
        f"expected an SQLAlchemy Connection or Session to run on, got {type(connection).__name__}"
    )


class TaskRepository:
    """The SQL protocol of ``scheduled_tasks`` for one table on one database."""

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
        self.notify_channel = notify_channel if dialect.dialect is Dialect.POSTGRESQL else None
        self._autocommit = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if dialect.dialect is Dialect.POSTGRESQL
            else None
        )
        self.dialect = dialect
        self.resolver = resolver
        self.table_name = validate_table_name(table_name)
        self.picked_by = picked_by[:50]
        self.priority_enabled = priority_enabled
        #: whether the table has the optional ``priority`` column; None until first looked up
        self._has_priority: bool | None = None
        self._columns_lock = threading.Lock()
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
        insert_cols = "task_name, task_instance, task_data, execution_time, picked, version"
        # every value a placeholder: PyMySQL folds an executemany into one multi-row INSERT only then
        insert_vals = ":task_name, :task_instance, :task_data, :execution_time, :picked, :version"
        if self.priority_enabled:
            insert_cols += ", priority"
            insert_vals += ", :priority"
        plain_insert = f"INSERT INTO {t} ({insert_cols}) VALUES ({insert_vals})"
        self._sql_insert = sa.text(plain_insert)
        if self.dialect.dialect in (Dialect.POSTGRESQL, Dialect.SQLITE):
            self._sql_insert_if_absent: sa.TextClause | None = sa.text(
                plain_insert + " ON CONFLICT (task_name, task_instance) DO NOTHING"
            )
        else:
            # MySQL/MariaDB: INSERT IGNORE would also swallow truncation and other errors, so a
            # duplicate is detected from the key violation instead (it leaves the transaction
            # usable on these servers).
            self._sql_insert_if_absent = None
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
        self._sql_claim_keys = sa.text(
            f"UPDATE {t} SET picked = :true, picked_by = :picked_by, last_heartbeat = :now, "
            "version = version + 1 WHERE (task_name, task_instance) IN :keys"
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
            self._sql_notify = sa.text(f"SELECT pg_notify({self.notify_channel}, :payload)")
            self._sql_insert_and_notify = sa.text(
                f"WITH inserted AS ({plain_insert} ON CONFLICT (task_name, task_instance) DO NOTHING RETURNING 1) "
                f"SELECT pg_notify({self.notify_channel}, :payload) FROM inserted"
            )
        # One statement text whatever the batch size, so it is compiled once: PostgreSQL
        # takes three arrays, the others an expanding list of (name, instance, version) rows.
        if self.dialect.dialect is Dialect.POSTGRESQL:
            self._sql_remove_many = sa.text(
                f"DELETE FROM {t} WHERE (task_name, task_instance, version) IN "
                "(SELECT * FROM unnest(CAST(:names AS text[]), CAST(:instances AS text[]), CAST(:versions AS bigint[]))) "
                "RETURNING task_name, task_instance"
            )
        else:
            self._sql_remove_many = sa.text(
                f"DELETE FROM {t} WHERE (task_name, task_instance, version) IN :keys RETURNING task_name, task_instance"
            ).bindparams(sa.bindparam("keys", expanding=True))

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
                self.engine,
                f"UPDATE {t} SET picked = :true, picked_by = :picked_by, last_heartbeat = :now, "
                f"version = version + 1 WHERE (task_name, task_instance) IN (SELECT task_name, "
                f"task_instance FROM {t} WHERE {key} AND picked = :false AND execution_time <= :now "
                f"FOR UPDATE SKIP LOCKED) RETURNING {columns}",
            )

    @property
    def _select_one(self) -> sa.TextClause:
        if self._sql_get is None:
            self.detect_columns()
        assert self._sql_get is not None
        return self._sql_get

    def _remove_many_params(self, executions: Sequence[Execution]) -> dict[str, Any]:
        if self.dialect.dialect is Dialect.POSTGRESQL:
            return {
                "names": [e.task_name for e in executions],
                "instances": [e.instance_id for e in executions],
                "versions": [e.version for e in executions],
            }
        return {"keys": [(e.task_name, e.instance_id, e.version) for e in executions]}

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
        names = self.resolver.unresolved_names()
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
        with self._one() if single else self.engine.begin() as conn:
            yield conn

    def _one(self) -> Any:
        """A connection for one statement, committed on success.

        On PostgreSQL that is an autocommit connection: psycopg would otherwise spend two extra
        round trips (BEGIN, COMMIT) around every single-statement write.
        """
        return self._autocommit.connect() if self._autocommit is not None else self.engine.begin()

    def _single_rowcount(self, statement: sa.TextClause, params: dict[str, Any]) -> int:
        """Run one single-statement write in its own commit; its row count. A write the database
        aborted for a deadlock (or SQLite's busy lock) is tried again: the abort undid it whole."""
        driver = self._direct.get(statement)
        if driver is not None and driver.usable:
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
            execution_time=d.decode_time(row[3]),  # type: ignore[arg-type]
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
        with self._tx(connection) as conn:
            if conn.execute(self._select_one, params).first() is not None:
                return False
            try:
                conn.execute(self._sql_insert, params)
                return True
            except IntegrityError as exc:
                # Lost the race to another inserter. Under REPEATABLE READ (MySQL's default) a
                # re-read sees this transaction's snapshot, taken before the winner committed,
                # so the server's duplicate-key error is the evidence.
                if _is_duplicate_key(exc) or conn.execute(self._select_one, params).first() is not None:
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
            with self._tx(connection) as conn:
                conn.execute(self._sql_insert, [self._insert_params(n) for n in batch])
                self._notify(conn, min(n.execution_time for n in batch))
        except IntegrityError as exc:
            raise FailedToScheduleBatchError(
                f"failed to schedule a batch of {len(batch)} executions (first: "
                f"{batch[0].task_name}/{batch[0].instance_id}); one of them probably exists already: "
                f"{exc.orig}"
            ) from exc

    # ------------------------------------------------------------------ polling
    def get_due(self, now: datetime, limit: int) -> list[Execution]:
        clause, extra = self._not_in_unresolved()
        sql = self._statement(
            "due",
            clause,
            limit,
            lambda: (
                f"SELECT {self.columns} FROM {self.table_name} WHERE picked = :false AND execution_time <= :now"
                f"{clause} ORDER BY {self._order_due}{self.dialect.limit(limit)}"
            ),
        )
        params = {"false": self.dialect.encode_bool(False), "now": self.dialect.encode_time(now), **extra}
        with self._reading() as conn:
            rows = conn.execute(sql, params).all()
        return self._resolved(rows)

    def next_execution_time(self, now: datetime) -> datetime | None:
        """The earliest future ``execution_time`` of a not-picked row (times the next poll).

        Strictly after ``now``: rows already due are the current poll's business (or being
        claimed right now), not a reason to wake up again.
        """
        clause, extra = self._not_in_unresolved()
        # ORDER BY … LIMIT 1 rather than MIN(): it walks the execution_time index and stops at
        # the first match on every dialect (MariaDB scans the whole range for the MIN form).
        sql = self._statement(
            "next_due",
            clause,
            1,
            lambda: (
                f"SELECT execution_time FROM {self.table_name} WHERE picked = :false "
                f"AND execution_time > :now{clause} ORDER BY execution_time ASC{self.dialect.limit(1)}"
            ),
        )
        params = {"false": self.dialect.encode_bool(False), "now": self.dialect.encode_time(now), **extra}
        with self._reading() as conn:
            value = conn.execute(sql, params).scalar()
        return self.dialect.decode_time(value)

    def pick(self, execution: Execution, now: datetime) -> Execution | None:
        """Optimistically claim ``execution``; None when another instance got there first."""
        params = {
            "true": self.dialect.encode_bool(True),
            "false": self.dialect.encode_bool(False),
            "picked_by": self.picked_by,
            "now": self.dialect.encode_time(now),
            "task_name": execution.task_name,
            "task_instance": execution.instance_id,
            "version": execution.version,
        }
        count = self._single_rowcount(self._sql_pick, params)
        if count == 0:
            return None
        if count > 1:
            raise ExecutionError(
                "claim updated more than one row",
                execution.task_name,
                execution.instance_id,
                execution.version,
            )
        # The row cannot have changed between the read and the claim (its version matched),
        # so the claimed state is known without reading it again.
        return execution.with_changes(
            picked=True, picked_by=self.picked_by, last_heartbeat=now, version=execution.version + 1
        )

    @property
    def claims_notified(self) -> bool:
        """Whether :meth:`claim_notified` may run now: PostgreSQL through psycopg, and nothing
        watching the engine's statements (a claim on the listener's connection would pass by
        execute and cursor listeners unseen)."""
        if self._has_priority is None and self.notify_channel is not None:
            try:
                self.detect_columns()  # the claim returns the row: its columns must be known
            except Exception:
                return False  # the poller finds the execution instead
        return self._claim_notified is not None and self._claim_notified.usable

    def claim_notified(self, key: TaskInstanceId, now: datetime, connection: Any) -> Execution | None:
        """Claim the execution a notification named, on the listener's own psycopg
        ``connection`` (autocommit), if it is still due and unpicked; None when another instance
        got there first, or it was deleted, rescheduled or is not due yet."""
        assert self._claim_notified is not None, "check claims_notified first"
        row = self._claim_notified.first_row_on(connection, self._notified_params(key, now))
        return None if row is None else self._execution(row)

    def _notified_params(self, key: TaskInstanceId, now: datetime) -> dict[str, Any]:
        return {
            "true": True,
            "false": False,
            "picked_by": self.picked_by,
            "now": self.dialect.encode_time(now),
            "task_name": key.task_name,
            "task_instance": key.id,
        }

    def release_notified(self, key: TaskInstanceId, now: datetime) -> bool:
        """Give back the claim :meth:`claim_notified` made at ``now``, if it landed after all;
        whether there was one to give back."""
        with self._one() as conn:
            return conn.execute(self._sql_release_notified, self._notified_params(key, now)).rowcount == 1

    def server_has_skip_locked(self) -> bool:
        """Whether the server has ``SELECT … FOR UPDATE SKIP LOCKED`` (reads its version where
        that decides it: MySQL ≥ 8.0.1, MariaDB ≥ 10.6)."""
        query = self.dialect.server_version_query()
        if query is None:
            return self.dialect.supports_skip_locked("")
        with self._reading() as conn:
            self.server_version = str(conn.exec_driver_sql(query).scalar())
        return self.dialect.supports_skip_locked(self.server_version)

    def server_description(self) -> str:
        version = getattr(self, "server_version", None)
        return self.dialect.name if version is None else f"{self.dialect.name} server {version}"

    def _known_names(self) -> tuple[str, dict[str, Any]]:
        """`` AND task_name IN (…)`` of the tasks this process can run (empty when none)."""
        names = sorted(self.resolver.tasks)
        placeholders = ", ".join(f":k{i}" for i in range(len(names)))
        return f" AND task_name IN ({placeholders})", {f"k{i}": n for i, n in enumerate(names)}

    def lock_and_fetch(self, now: datetime, limit: int) -> list[Execution]:
        """Claim up to ``limit`` due rows at once with ``FOR UPDATE SKIP LOCKED``.

        Only rows of tasks this process knows: a claim of another application's row (Java's, a
        newer release's) would have to be given back, bumping its version under the feet of
        whoever is reading or cancelling it. Such rows are met by :meth:`record_unknown_due`.
        """
        if not self.dialect.supports_lock_and_fetch:
            raise NotImplementedError(f"{self.dialect.name} does not support lock-and-fetch")
        if not self.resolver.tasks:
            return []
        d = self.dialect
        clause, extra = self._known_names()
        params = {
            "true": d.encode_bool(True),
            "false": d.encode_bool(False),
            "picked_by": self.picked_by,
            "now": d.encode_time(now),
            **extra,
        }
        if d.single_statement_lock_and_fetch:
            t = self.table_name
            sql = self._statement(
                "lock_and_fetch",
                clause,
                limit,
                lambda: (
                    f"WITH locked AS (UPDATE {t} st1 SET picked = :true, picked_by = :picked_by, "
                    "last_heartbeat = :now, version = version + 1 "
                    f"WHERE (st1.task_name, st1.task_instance) IN (SELECT st2.task_name, st2.task_instance FROM {t} st2 "
                    f"WHERE picked = :false AND execution_time <= :now{clause} ORDER BY {self._order_due}"
                    f"{d.lock_and_fetch_select_tail(limit)}) RETURNING st1.*) "
                    f"SELECT {self.columns} FROM locked ORDER BY {self._order_due}"
                ),
            )
            with self._one() as conn:
                rows = conn.execute(sql, params).all()
            executions = [self._execution(r) for r in rows]
            known = [e for e in executions if self.resolver.resolve(e.task_name) is not None]
            unknown = [e for e in executions if self.resolver.resolve(e.task_name) is None]
            if unknown:
                for e in unknown:
                    self.resolver.add_unresolved(e.task_name, e.execution_time)
                self.unpick(unknown)
            return known
        select = self._statement(
            "lock_select",
            clause,
            limit,
            lambda: (
                f"SELECT {self.columns} FROM {self.table_name} WHERE picked = :false AND execution_time <= :now"
                f"{clause} ORDER BY {self._order_due}{d.lock_and_fetch_select_tail(limit)}"
            ),
        )

        start = d.claim_transaction_start()

        # A select and an update of its keys in one transaction: neither MySQL nor MariaDB has
        # SKIP LOCKED in UPDATE, nor (MariaDB) UPDATE … RETURNING.
        def claim() -> list[Execution]:
            with self.engine.begin() as conn:
                if start is not None:
                    conn.exec_driver_sql(start)
                candidates = self._resolved(conn.execute(select, params).all())
                if not candidates:
                    return []
                update = self._sql_claim_keys.bindparams(
                    sa.bindparam("keys", [(e.task_name, e.instance_id) for e in candidates], expanding=True)
                )
                updated = conn.execute(update, params).rowcount
                if updated != len(candidates):
                    log.error("lock-and-fetch locked %d rows but updated %d", len(candidates), updated)
            return candidates

        return [
            e.with_changes(picked=True, picked_by=self.picked_by, last_heartbeat=now, version=e.version + 1)
            for e in with_retries(claim)
        ]

    def record_unknown_due(self, now: datetime, limit: int = 100) -> int:
        """Record as unresolved the task names of due, unpicked rows this process does not know
        (lock-and-fetch never claims them, so it never meets them); how many rows it read."""
        known, params = self._known_names() if self.resolver.tasks else ("", {})
        unresolved, extra = self._not_in_unresolved()
        sql = self._statement(
            "unknown_due",
            known + unresolved,
            limit,
            lambda: (
                f"SELECT task_name, execution_time FROM {self.table_name} WHERE picked = :false "
                f"AND execution_time <= :now{known.replace(' IN ', ' NOT IN ')}{unresolved} "
                f"ORDER BY execution_time ASC{self.dialect.limit(limit)}"
            ),
        )
        d = self.dialect
        with self._reading() as conn:
            rows = conn.execute(
                sql, {"false": d.encode_bool(False), "now": d.encode_time(now), **params, **extra}
            ).all()
        for name, execution_time in rows:
            self.resolver.add_unresolved(name, d.decode_time(execution_time))  # type: ignore[arg-type]
        return len(rows)

    def unpick(self, executions: Sequence[Execution]) -> None:
        """Release picked rows (unknown tasks met by the single-statement lock-and-fetch)."""
        for e in executions:
            try:
                with self._one() as conn:
                    count = conn.execute(
                        self._sql_unpick,
                        {
                            "false": self.dialect.encode_bool(False),
                            "true": self.dialect.encode_bool(True),
                            "version": e.version,
                            "task_name": e.task_name,
                            "task_instance": e.instance_id,
                        },
                    ).rowcount
                if count != 1:
                    log.error("failed to release %s (it was not picked at version %d)", e, e.version)
            except Exception:
                log.exception("failed to release %s", e)

    # ------------------------------------------------------------------ completion
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
            with self._one() as conn:
                rows = conn.execute(self._sql_remove_many, self._remove_many_params(executions))
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
        new_data: Any = _KEEP,
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
        if new_data is not _KEEP:
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
        with self._read(connection) as conn:
            rows = conn.execute(
                self._select_one, {"task_name": task_name, "task_instance": instance_id}
            ).all()
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

    def summary_by_task(self, connection: ConnectionLike | None = None) -> list[TaskSummary]:
        sql = sa.text(
            "SELECT task_name, COUNT(*), "
            "SUM(CASE WHEN picked = :true THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN picked = :false AND COALESCE(consecutive_failures, 0) > 0 THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN picked = :false AND COALESCE(consecutive_failures, 0) = 0 THEN 1 ELSE 0 END), "
            "MIN(execution_time), MAX(last_success), MAX(last_failure), MAX(consecutive_failures) "
            f"FROM {self.table_name} GROUP BY task_name ORDER BY task_name"
        )
        d = self.dialect
        with self._read(connection) as conn:
            rows = conn.execute(sql, {"true": d.encode_bool(True), "false": d.encode_bool(False)}).all()
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
            )
            for r in rows
        ]

    @contextmanager
    def _read(self, connection: ConnectionLike | None) -> Iterator[sa.Connection]:
        if connection is not None:
            yield as_connection(connection)
            return
        with self._reading() as conn:
            yield conn
