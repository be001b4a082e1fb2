"""``action_traces``: the W3C trace context an action kept with its events (when it ran under a
span with tracing on), read by the handling job so that each handler call's span links to the
action's, and pruned by it once no notification can still need it.

Both tolerate a shard whose table is missing (a database last migrated before core's
``outbox 1`` created it): reads find nothing there, and one warning says what to run.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa

from ekbatan.core.migrations import TablePresence
from ekbatan.core.persistence import TransactionManager
from ekbatan.local_event_handler.connections import pipeline_connection
from ekbatan.local_event_handler.handling_sql import HandlingTables

log = logging.getLogger("ekbatan.local_event_handler.tracing")

#: how often, at most, each process prunes each shard
PRUNE_EVERY = 600.0
#: rows deleted per statement, and statements per prune: bounded, whatever the backlog
PRUNE_BATCH = 1000
PRUNE_BATCHES = 10


class ActionTraces:
    def __init__(self) -> None:
        #: whether each shard's table is there yet (found again once migrated); pruning looks
        #: on its own, silently — it runs with tracing off too, and must not eat the warning
        self._presence = TablePresence()
        self._prune_presence = TablePresence()
        self._pruned_at: dict[str, float] = {}

    def contexts(
        self, manager: TransactionManager, t: HandlingTables, action_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, dict[str, str]]:
        """The kept context of each of ``action_ids`` that has one: ``{"traceparent": …}``."""
        if not action_ids:
            return {}
        traces = t.action_traces
        with pipeline_connection(manager.primary, writes=False) as connection:
            if not self._table_exists(connection, traces):
                return {}
            rows = connection.execute(
                sa.select(traces.c.action_id, traces.c.traceparent, traces.c.tracestate).where(
                    traces.c.action_id.in_(list(action_ids))
                )
            ).all()
        found: dict[uuid.UUID, dict[str, str]] = {}
        for action_id, traceparent, tracestate in rows:
            carrier = {"traceparent": traceparent}
            if tracestate:
                carrier["tracestate"] = tracestate
            found[action_id] = carrier
        return found

    def prune(self, manager: TransactionManager, t: HandlingTables, before: datetime) -> int:
        """Delete contexts kept before ``before`` (at most once per ``PRUNE_EVERY`` per shard)."""
        traces = t.action_traces
        key = str(traces)
        now = time.monotonic()
        if now - self._pruned_at.get(key, -PRUNE_EVERY) < PRUNE_EVERY:
            return 0
        self._pruned_at[key] = now
        deleted = 0
        with pipeline_connection(manager.primary) as connection:
            if not self._prune_presence.exists(connection, traces)[0]:
                return 0
            for _ in range(PRUNE_BATCHES):
                # ids first, then a delete by key: MariaDB has no LIMIT in an IN subquery
                ids = (
                    connection.execute(
                        sa.select(traces.c.action_id).where(traces.c.recorded < before).limit(PRUNE_BATCH)
                    )
                    .scalars()
                    .all()
                )
                if not ids:
                    break
                connection.execute(sa.delete(traces).where(traces.c.action_id.in_(ids)))
                connection.commit()
                deleted += len(ids)
        if deleted:
            log.debug("pruned %d action trace context(s) of %s", deleted, key)
        return deleted

    def _table_exists(self, connection: sa.Connection, traces: sa.Table) -> bool:
        exists, first_missing = self._presence.exists(connection, traces)
        if first_missing:
            log.warning(
                "tracing: %s is missing, so handler spans cannot link to the actions that recorded "
                "their events; run 'ekbatan migrate' (outbox 1)",
                traces,
            )
        return exists
