"""``EventHandlingJob``: calls the handlers of due notifications and records what happened.

Per shard and round (no surrounding transaction):

1. read due rows (``PENDING``/``FAILED`` with ``next_retry_at <= now``) from the **primary** —
   a replica could hand back rows already handled;
2. set aside rows whose event is older than the retention window: they expire unhandled;
3. call every other row's handler in parallel and wait for all of them;
4. read the clock again (``post``) — every decision and timestamp below uses it, so a slow
   round never schedules a retry that is already in the past;
5. bucket the outcomes and write each bucket with one UPDATE, each guarded by the state and
   attempts read in step 1: pre-flight expired, succeeded, expired after failing, and one
   bucket of retries per attempt count (next try after a capped exponential backoff).

A crash between the calls and the UPDATEs leaves the rows due: they run again (delivery is at
least once). Nothing a handler does — raise anything, hang past ``handler_timeout``, be
missing from the code — can cost the other rows of the round their outcome.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ekbatan.core.outbox import EventCodec, default_codec, utc_now
from ekbatan.core.persistence import TransactionManager
from ekbatan.local_event_handler import handling_sql as sql
from ekbatan.local_event_handler.action_traces import ActionTraces
from ekbatan.local_event_handler.backoff import backoff_delay
from ekbatan.local_event_handler.connections import pipeline_connection
from ekbatan.local_event_handler.dispatch import HandlerDispatcher, Invocation
from ekbatan.local_event_handler.envelope import EventEnvelope
from ekbatan.local_event_handler.notifications_table import notifications_channel
from ekbatan.local_event_handler.option_checks import require_positive, require_timedelta
from ekbatan.local_event_handler.pipeline_job import PipelineJob, PipelineJobBuilder
from ekbatan.local_event_handler.shard_rounds import ShardRounds
from ekbatan.local_event_handler.states import NotificationState

if TYPE_CHECKING:
    from ekbatan.local_event_handler._telemetry.wiring import HandlingTelemetry

log = logging.getLogger("ekbatan.local_event_handler")

DEFAULT_HANDLING_NAME = "ekbatan-event-handling"
DEFAULT_HANDLING_BATCH_SIZE = 100
DEFAULT_MAX_BACKOFF_CAP = timedelta(minutes=5)
DEFAULT_RETENTION_WINDOW = timedelta(days=7)


class EventHandlingJobBuilder(PipelineJobBuilder):
    def __init__(self) -> None:
        super().__init__(DEFAULT_HANDLING_NAME, DEFAULT_HANDLING_BATCH_SIZE)
        self._max_backoff_cap = DEFAULT_MAX_BACKOFF_CAP
        self._retention_window = DEFAULT_RETENTION_WINDOW
        self._codec: EventCodec = default_codec
        self._handler_timeout: timedelta | None = None

    def max_backoff_cap(self, cap: timedelta) -> EventHandlingJobBuilder:
        """The longest wait between two tries of a failing notification (default 5 min)."""
        require_timedelta(cap, "max_backoff_cap")
        require_positive(cap, "max_backoff_cap", "timedelta(minutes=5)")
        self._max_backoff_cap = cap
        return self

    def retention_window(self, window: timedelta) -> EventHandlingJobBuilder:
        """How long after its event a notification may still be tried (default 7 days); then it
        expires, logged at ERROR."""
        require_timedelta(window, "retention_window")
        require_positive(window, "retention_window", "timedelta(days=7)")
        self._retention_window = window
        return self

    def codec(self, codec: EventCodec) -> EventHandlingJobBuilder:
        """Decodes payloads into the handlers' event classes: the codec the events were written
        with (the process-wide ``default_codec`` unless you gave the ActionExecutor another)."""
        if not isinstance(codec, EventCodec):
            raise TypeError(f"codec must be an EventCodec; got {type(codec).__name__}")
        self._codec = codec
        return self

    def handler_timeout(self, timeout: timedelta | None) -> EventHandlingJobBuilder:
        """Record a call still running after ``timeout`` as a failed try, so one hung handler
        cannot stall the round (default: no timeout). A plain method keeps its thread until it
        returns; an ``async def`` handler is cancelled."""
        if timeout is not None:
            require_timedelta(timeout, "handler_timeout")
            require_positive(timeout, "handler_timeout", "timedelta(seconds=30)")
        self._handler_timeout = timeout
        return self

    def build(self) -> EventHandlingJob:
        return EventHandlingJob(
            **self._options(),
            max_backoff_cap=self._max_backoff_cap,
            retention_window=self._retention_window,
            codec=self._codec,
            handler_timeout=self._handler_timeout,
        )


@dataclass
class _Buckets:
    """Row ids by what happens to them, each keyed by the attempts read (the UPDATEs' guard)."""

    expired_unhandled: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    succeeded: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    expired_failing: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    retry: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))


class EventHandlingJob(PipelineJob):
    """Build with ``EventHandlingJob.builder()...build()``; register with a ``JobRegistry``."""

    @staticmethod
    def builder() -> EventHandlingJobBuilder:
        return EventHandlingJobBuilder()

    def __init__(
        self,
        *,
        max_backoff_cap: timedelta,
        retention_window: timedelta,
        codec: EventCodec,
        handler_timeout: timedelta | None,
        **options: Any,
    ) -> None:
        super().__init__(wake_channel=notifications_channel, **options)
        self._max_backoff_cap = max_backoff_cap
        self._retention_window = retention_window
        self._codec = codec
        self._handler_timeout = handler_timeout
        self._rounds = ShardRounds("handling", f"{self._name}-shard")
        shards = len(self._database_registry)
        self._dispatcher = HandlerDispatcher(
            max_threads=self._batch_size * shards, timeout=handler_timeout, name=f"{self._name}-handler"
        )
        self._telemetry: HandlingTelemetry | None = None
        #: the actions' trace contexts: read for handler spans, pruned past the retention window
        self._action_traces = ActionTraces()
        if self._telemetry_settings is not None:
            from ekbatan.local_event_handler._telemetry.wiring import handling_telemetry

            self._telemetry = handling_telemetry(
                self._telemetry_settings, self._database_registry, self._handlers, self._clock
            )

    @property
    def max_backoff_cap(self) -> timedelta:
        return self._max_backoff_cap

    @property
    def retention_window(self) -> timedelta:
        return self._retention_window

    @property
    def handler_timeout(self) -> timedelta | None:
        return self._handler_timeout

    def drain_one_round(self) -> bool:
        self._round_begins()
        return self._rounds.run(self._database_registry.transaction_managers(), self._handle_shard) > 0

    def _handle_shard(self, manager: TransactionManager) -> int:
        t = sql.tables(manager.dialect, manager.eventlog_schema)
        now = utc_now(self._clock)
        with pipeline_connection(manager.primary, writes=False) as connection:
            reads = sql.due_notifications(t, manager.dialect, now, self._batch_size)
            rows = sql.merge_due([connection.execute(read).all() for read in reads], self._batch_size)
        self._prune_action_traces(manager, t, now)
        if not rows:
            return 0
        expired_unhandled: list[sa.Row[Any]] = []
        to_call: list[sa.Row[Any]] = []
        for row in rows:
            (expired_unhandled if now > row.event_date + self._retention_window else to_call).append(row)
        # the wall clock and the monotonic clock read together: a call's start (monotonic) in
        # wall-clock time, for the delivery lag
        dispatched = (utc_now(self._clock), time.monotonic()) if self._telemetry is not None else None
        invocations = self._invoke(to_call, self._action_contexts(manager, t, to_call))
        post = utc_now(self._clock)
        buckets = _Buckets()
        for row in expired_unhandled:
            buckets.expired_unhandled[row.attempts].append(row)
        results: list[str] = []
        for row, invocation in zip(to_call, invocations, strict=True):
            if invocation.succeeded:
                buckets.succeeded[row.attempts].append(row)
                results.append("succeeded")
            elif post + backoff_delay(row.attempts + 1, self._max_backoff_cap) > (
                row.event_date + self._retention_window
            ):
                buckets.expired_failing[row.attempts].append(row)
                results.append("expired")
            else:
                buckets.retry[row.attempts].append(row)
                results.append("failed")
        if self._telemetry is not None and self._telemetry.metrics is not None and dispatched is not None:
            self._measure(to_call, invocations, results, dispatched)
        self._record(manager, t, buckets, post)
        return self._shard_batch(len(rows))

    def _measure(
        self,
        rows: Sequence[sa.Row[Any]],
        invocations: Sequence[Invocation],
        results: Sequence[str],
        dispatched: tuple[datetime, float],
    ) -> None:
        """The handler calls' durations, and the delivery lag of each event's first call."""
        assert self._telemetry is not None and self._telemetry.metrics is not None
        metrics = self._telemetry.metrics
        wall, monotonic = dispatched
        now = time.monotonic()
        for row, invocation, result in zip(rows, invocations, results, strict=True):
            started = invocation.started
            if started is None:  # never called (no handler by that name, an undecodable payload)
                continue
            # a call that timed out and still runs has no duration yet: it took this long so far
            metrics.call(row.handler_name, result, invocation.seconds or now - started)
            if row.attempts == 0:
                metrics.lag(row.handler_name, row.event_date, wall + timedelta(seconds=started - monotonic))

    def _action_contexts(
        self, manager: TransactionManager, t: Any, rows: Sequence[sa.Row[Any]]
    ) -> dict[Any, dict[str, str]]:
        """The trace context of the actions that recorded ``rows``' events, when the handler
        spans use them (one read per round)."""
        tracing = None if self._telemetry is None else self._telemetry.tracing
        if tracing is None or not tracing.uses_action_context:
            return {}
        try:
            return self._action_traces.contexts(manager, t, {row.action_id for row in rows})
        except sa.exc.SQLAlchemyError as error:  # a span without its link, never a lost round
            log.warning("reading the actions' trace context failed: %s: %s", type(error).__name__, error)
            return {}

    def _prune_action_traces(self, manager: TransactionManager, t: Any, now: datetime) -> None:
        try:
            self._action_traces.prune(manager, t, now - self._retention_window)
        except sa.exc.SQLAlchemyError as error:
            log.warning("pruning the actions' trace context failed: %s: %s", type(error).__name__, error)

    def _invoke(self, rows: Sequence[sa.Row[Any]], contexts: dict[Any, dict[str, str]]) -> list[Invocation]:
        """Every row's outcome, in order; rows that cannot be called fail without a call."""
        outcomes: list[Invocation | None] = []
        calls: list[tuple[Any, Any]] = []
        for row in rows:
            try:
                calls.append(self._call_for(row, contexts.get(row.action_id)))
                outcomes.append(None)
            except Exception as error:
                outcomes.append(Invocation(error))
        called = iter(self._dispatcher.run_all(calls))
        results = [outcome if outcome is not None else next(called) for outcome in outcomes]
        for row, result in zip(rows, results, strict=True):
            if result.error is not None:
                log.warning(
                    "handler %r failed for event %s (attempt %d): %s: %s",
                    row.handler_name,
                    row.event_id,
                    row.attempts + 1,
                    type(result.error).__name__,
                    result.error,
                )
        return results

    def _call_for(
        self, row: sa.Row[Any], action_context: dict[str, str] | None
    ) -> tuple[Any, EventEnvelope[Any]]:
        handler = self._handlers.handler_for(row.handler_name)
        if handler is None:
            raise LookupError(
                f"No handler registered with name: {row.handler_name} (event {row.event_id}); keep a "
                "renamed handler's old name in its aliases() until its rows are done"
            )
        event = self._codec.decode(row.payload if row.payload is not None else {}, handler.event_type())
        envelope = EventEnvelope(
            event=event,
            event_id=row.event_id,
            namespace=row.namespace,
            action_id=row.action_id,
            action_name=row.action_name,
            action_params=row.action_params,
            started_date=row.started_date,
            completion_date=row.completion_date,
            model_id=row.model_id,
            model_type=row.model_type,
            event_date=row.event_date,
        )
        handle: Callable[[Any], Any] = handler.handle
        if self._telemetry is not None and self._telemetry.tracing is not None:
            handle = self._telemetry.tracing.wrap(handle, row, action_context)
        return handle, envelope

    def _record(self, manager: TransactionManager, t: Any, buckets: _Buckets, post: datetime) -> None:
        expired = NotificationState.EXPIRED
        writes: list[tuple[dict[int, list[Any]], NotificationState, bool]] = [
            (buckets.expired_unhandled, expired, False),
            (buckets.succeeded, NotificationState.SUCCEEDED, True),
            (buckets.expired_failing, expired, True),
        ]
        # Each bucket commits on its own: a failure writing one loses no other bucket's outcome.
        with pipeline_connection(manager.primary) as connection:
            for grouped, state, count_attempt in writes:
                for attempts, rows in grouped.items():
                    connection.execute(
                        sql.record_outcome(
                            t,
                            [row.id for row in rows],
                            attempts_read=attempts,
                            state=state,
                            count_attempt=count_attempt,
                            updated=post,
                        )
                    )
                    connection.commit()
            for attempts, rows in sorted(buckets.retry.items()):
                connection.execute(
                    sql.record_outcome(
                        t,
                        [row.id for row in rows],
                        attempts_read=attempts,
                        state=NotificationState.FAILED,
                        count_attempt=True,
                        updated=post,
                        next_retry_at=post + backoff_delay(attempts + 1, self._max_backoff_cap),
                    )
                )
                connection.commit()
        self._log_expired(buckets.expired_unhandled, "its event was older than the retention window", 0)
        self._log_expired(buckets.expired_failing, "it kept failing until the retention window ended", 1)

    def _log_expired(self, grouped: dict[int, list[Any]], reason: str, tries_now: int) -> None:
        by_handler: dict[str, list[Any]] = defaultdict(list)
        for rows in grouped.values():
            for row in rows:
                by_handler[row.handler_name].append(row)
        for handler_name, rows in by_handler.items():
            example = rows[0]
            log.error(
                "DISCARDED %d notification(s) for handler %r: %s (retention window %s); e.g. event %s "
                "after %d attempt(s)",
                len(rows),
                handler_name,
                reason,
                self._retention_window,
                example.event_id,
                example.attempts + tries_now,
            )

    def close(self) -> None:
        self._rounds.close()
        self._dispatcher.close()
