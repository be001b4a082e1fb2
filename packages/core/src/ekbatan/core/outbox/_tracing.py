"""A span per action, and its W3C trace context kept with the action's events.

With tracing on (``ActionExecutor(tracing=True)``; needs ``opentelemetry-api``, the ``otel``
extra, and an SDK tracer provider the application installs), each ``execute`` runs inside a span
named ``action <ActionName>``. When the action records events, its span's ``traceparent`` is
written to ``action_traces`` (migration ``outbox 1``) in the action's own transaction, one row per
shard it wrote, so that the spans of the handlers those events reach — in another process,
minutes later — link to it. ``events`` and ``event_notifications`` are not changed.

Tracing never fails an action: a shard whose ``action_traces`` table is missing (a database
last migrated before the table existed) is written nothing, and one warning says what to run;
once migrated, the table is found again within a minute.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.core.migrations._eventlog_metadata import eventlog_tables
from ekbatan.core.migrations._table_presence import TablePresence
from ekbatan.core.persistence._dialect_names import DialectName

log = logging.getLogger("ekbatan.core.outbox.tracing")

#: the instrumentation scope of the action spans
SCOPE = "ekbatan.core"


def sdk_tracer_provider(given: Any) -> Any | None:
    """``given``, else OpenTelemetry's global tracer provider; None when that is the API's own
    no-op (an SDK's provider lives outside the API's package), said in one INFO line."""
    try:
        from opentelemetry import trace
    except ImportError:
        raise ImportError(
            "ActionExecutor(tracing=True) needs opentelemetry-api: pip install 'ekbatan-core[otel]'"
        ) from None
    provider = given or trace.get_tracer_provider()
    if type(provider).__module__.startswith(trace.__name__):
        log.info(
            "tracing: no OpenTelemetry SDK tracer provider is installed, so actions make no spans; "
            "install one (set_tracer_provider) before building the ActionExecutor, or pass it"
        )
        return None
    return provider


class ActionTracing:
    """Makes the action spans and writes their context to each shard's ``action_traces``."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self._kind = SpanKind.INTERNAL
        self._error = Status(StatusCode.ERROR)
        self._propagator = TraceContextTextMapPropagator()
        #: whether each shard's action_traces table is there yet (found again once migrated)
        self._tables = TablePresence()

    @contextmanager
    def span(self, action_name: str, action_id: uuid.UUID, namespace: str) -> Iterator[Any]:
        attributes = {
            "ekbatan.action": action_name,
            "ekbatan.action_id": str(action_id),
            "ekbatan.namespace": namespace,
        }
        with self.tracer.start_as_current_span(
            f"action {action_name}",
            kind=self._kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as error:
                span.record_exception(error)
                span.set_status(self._error)
                raise

    def carrier(self) -> dict[str, str] | None:
        """The current span's ``traceparent`` (and ``tracestate``), or None outside a valid span."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier if "traceparent" in carrier else None

    def keep(
        self,
        connection: sa.Connection,
        *,
        dialect: DialectName,
        schema: str,
        action_id: uuid.UUID,
        carrier: dict[str, str],
        recorded: datetime,
    ) -> None:
        """Write the context of ``action_id`` in the action's transaction (nothing when the
        table is missing)."""
        table = eventlog_tables(dialect, schema).action_traces
        if not self._table_exists(connection, table):
            return
        connection.execute(
            table.insert().values(
                action_id=action_id,
                traceparent=carrier["traceparent"],
                tracestate=carrier.get("tracestate") or None,
                recorded=recorded,
            )
        )

    def _table_exists(self, connection: sa.Connection, table: sa.Table) -> bool:
        exists, first_missing = self._tables.exists(connection, table)
        if first_missing:
            log.warning(
                "tracing: %s is missing, so handler spans cannot link to the actions; run 'ekbatan migrate' "
                "(outbox 1)",
                table,
            )
        return exists
