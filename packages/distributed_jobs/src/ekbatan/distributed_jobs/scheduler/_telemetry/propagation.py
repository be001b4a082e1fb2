"""Trace context from a schedule call to the run it scheduled, across processes and time.

A schedule call made under a span (with tracing on) gets a PRODUCER span of its own, and its
W3C ``traceparent`` is kept in ``<table>_traces`` keyed by the execution — never in
``scheduled_tasks``, whose rows a Java db-scheduler sharing the table reads unchanged. The run
takes it (reads and deletes the row) and its span links to it, or is its child when asked.

A run looks its key up only for task names known to have stored contexts: the names are read
from the table at most once per ``refresh`` seconds per process (and a schedule made in this
process adds its name at once), so runs of untraced work cost nothing. A context stored from
another process for a task name that had none before may be missed by runs in that first
interval. Rows no run took (an execution cancelled, or run by a scheduler without tracing) are
pruned once a day after ``PRUNE_AFTER``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._execution import Execution
from ekbatan.distributed_jobs.scheduler._liveness.outage import FailureLog
from ekbatan.distributed_jobs.scheduler._table.held_ddl import traces_table_name
from ekbatan.distributed_jobs.scheduler._table.rows import ConnectionLike, NewExecution, as_connection

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.telemetry")

#: a stored context no run took within this long is deleted
PRUNE_AFTER = timedelta(days=7)
PRUNE_EVERY = 24 * 3600.0
_KEY = "task_name = :task_name AND task_instance = :task_instance"


class TraceContexts:
    """``<table>_traces``: stored by schedule calls, taken by runs."""

    def __init__(
        self, engine: sa.Engine, dialect: Any, table_name: str, clock: Clock, refresh: float
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self.name = traces_table_name(table_name)
        self.clock = clock
        self.refresh = refresh
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._names_read_at: float | None = None
        self._pruned_at = time.monotonic()
        self.failures = FailureLog("reading or writing trace context", log, retried=False)
        self._exists = sa.text(f"SELECT 1 FROM {self.name} WHERE {_KEY}")
        self._insert = sa.text(
            f"INSERT INTO {self.name} (task_name, task_instance, traceparent, tracestate, recorded) "
            "VALUES (:task_name, :task_instance, :traceparent, :tracestate, :recorded)"
        )
        self._update = sa.text(
            f"UPDATE {self.name} SET traceparent = :traceparent, tracestate = :tracestate, "
            f"recorded = :recorded WHERE {_KEY}"
        )
        self._select = sa.text(f"SELECT traceparent, tracestate FROM {self.name} WHERE {_KEY}")
        self._delete = sa.text(f"DELETE FROM {self.name} WHERE {_KEY}")

    # ------------------------------------------------------------------ storing
    def store(
        self, rows: Sequence[NewExecution], carrier: dict[str, str], connection: ConnectionLike
    ) -> None:
        """Keep ``carrier`` for each row, in the caller's transaction (undone with it). A plain
        read decides insert or update: no lock on a missing key (InnoDB's gap locks)."""
        conn = as_connection(connection)
        recorded = self.dialect.encode_time(self.clock.now())
        for row in rows:
            params = {
                "task_name": row.task_name,
                "task_instance": row.instance_id,
                "traceparent": carrier["traceparent"],
                "tracestate": carrier.get("tracestate"),
                "recorded": recorded,
            }
            if conn.execute(self._exists, params).first() is None:
                conn.execute(self._insert, params)
            else:
                conn.execute(self._update, params)
        with self._lock:
            self._names.update(row.task_name for row in rows)

    # ------------------------------------------------------------------ taking
    def take(self, execution: Execution) -> dict[str, str] | None:
        """The context stored for ``execution``, deleted as it is read; None when there is
        none (or its task name has none stored, as far as this process knows)."""
        if execution.task_name not in self._known_names():
            return None
        key = {"task_name": execution.task_name, "task_instance": execution.instance_id}
        try:
            with self.engine.begin() as conn:
                row = conn.execute(self._select, key).first()
                if row is not None:
                    conn.execute(self._delete, key)
            self.failures.succeeded()
        except sa.exc.SQLAlchemyError as exc:
            self.failures.failed(exc)  # the run goes on, unlinked
            return None
        if row is None:
            return None
        carrier = {"traceparent": row[0]}
        if row[1]:
            carrier["tracestate"] = row[1]
        return carrier

    def _known_names(self) -> set[str]:
        now = time.monotonic()
        if self._names_read_at is not None and now - self._names_read_at < self.refresh:
            return self._names
        with self._lock:
            if self._names_read_at is not None and now - self._names_read_at < self.refresh:
                return self._names
            self._names_read_at = now
            try:
                with self.engine.connect() as conn:
                    read = {
                        r[0] for r in conn.execute(sa.text(f"SELECT DISTINCT task_name FROM {self.name}"))
                    }
                    if now - self._pruned_at > PRUNE_EVERY:
                        self._pruned_at = now
                        self._prune(conn)
                self._names = read
            except sa.exc.SQLAlchemyError as exc:
                self.failures.failed(exc)
            return self._names

    def _prune(self, conn: sa.Connection) -> None:
        cutoff = self.dialect.encode_time(self.clock.now() - PRUNE_AFTER)
        deleted = conn.execute(
            sa.text(f"DELETE FROM {self.name} WHERE recorded < :cutoff"), {"cutoff": cutoff}
        )
        conn.commit()
        if deleted.rowcount:
            log.info("pruned %d trace context(s) no run took from %s", deleted.rowcount, self.name)


class ScheduleTracing:
    """A PRODUCER span per schedule call made under a span, whose context the run links to."""

    def __init__(self, tracer: Any, contexts: TraceContexts) -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self.contexts = contexts
        self._kind = SpanKind.PRODUCER
        # W3C trace context always (what the column holds), whatever the global propagator is
        self._propagator = TraceContextTextMapPropagator()

    @contextmanager
    def producing(self, rows: Sequence[NewExecution], connection: ConnectionLike | None) -> Iterator[None]:
        from opentelemetry import trace

        if not rows or not trace.get_current_span().get_span_context().is_valid:
            yield  # no trace to continue: nothing is stored
            return
        names = sorted({row.task_name for row in rows})
        attributes: dict[str, Any] = {
            "messaging.system": "ekbatan",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": names[0] if len(names) == 1 else ",".join(names),
            "messaging.batch.message_count": len(rows),
        }
        if len(rows) == 1:
            attributes["messaging.message.id"] = rows[0].instance_id
        label = names[0] if len(names) == 1 else "batch"
        with self.tracer.start_as_current_span(
            f"send {label}", kind=self._kind, attributes=attributes
        ) as span:
            if span.get_span_context().trace_flags.sampled:
                carrier: dict[str, str] = {}
                self._propagator.inject(carrier)
                if connection is None:
                    with self.contexts.engine.begin() as conn:
                        self._store(rows, carrier, conn)
                else:
                    self._store(rows, carrier, connection)
            yield

    def _store(
        self, rows: Sequence[NewExecution], carrier: dict[str, str], connection: ConnectionLike
    ) -> None:
        conn = as_connection(connection)
        if self.contexts.dialect.name == "sqlite":
            # one writer at a time there: no one can store the same key meanwhile (and pysqlite's
            # savepoints do not nest inside the caller's transaction)
            self.contexts.store(rows, carrier, conn)
            return
        try:
            # in a savepoint: a key stored by someone else meanwhile must not spoil the
            # caller's transaction (PostgreSQL aborts a transaction on any error)
            with conn.begin_nested():
                self.contexts.store(rows, carrier, conn)
        except IntegrityError:
            # stored by another schedule call of the same key at the same moment: theirs stands
            log.debug("trace context of %s/%s stored concurrently", rows[0].task_name, rows[0].instance_id)


def parent_context(carrier: dict[str, str]) -> Any:
    """The span context a run's span links to (or is the child of)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return trace.get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()
