"""Finding and claiming due executions: the fetch strategy's read-then-claim, lock-and-fetch,
the claim of an execution a notification named, and giving claims back."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._errors import ExecutionError
from ekbatan.distributed_jobs.scheduler._execution import Execution, TaskInstanceId
from ekbatan.distributed_jobs.scheduler._liveness.outage import describe, is_database_error
from ekbatan.distributed_jobs.scheduler._table.access import TableAccess
from ekbatan.distributed_jobs.scheduler._table.retries import with_retries

log = logging.getLogger("ekbatan.distributed_jobs.scheduler.repository")


class Claims(TableAccess):
    """The claiming half of the protocol."""

    def get_due(self, now: datetime, limit: int) -> list[Execution]:
        clause, extra = self._not_in_excluded()
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
        clause, extra = self._not_in_excluded()
        return self._earliest_unpicked(
            "next_due",
            f" AND execution_time > :now{clause}",
            {
                "now": self.dialect.encode_time(now),
                **extra,
            },
        )

    def earliest_claimable(self) -> datetime | None:
        """The earliest ``execution_time`` of a not-picked row of a task this process knows, due
        or not (times the next poll after a lock-and-fetch claim).

        Not bounded below by the claim's horizon: ``SKIP LOCKED`` passes over due rows another
        transaction holds, and those stay due and unpicked at or before that horizon. Only known
        names, as the claim takes: another application's due rows are not this poller's to
        come back for.
        """
        if not self.resolver.claimable_names():
            return None
        clause, extra = self._known_names()
        return self._earliest_unpicked("earliest_claimable", clause, extra)

    def _earliest_unpicked(self, kind: str, condition: str, params: dict[str, Any]) -> datetime | None:
        # ORDER BY … LIMIT 1 rather than MIN(): it walks the execution_time index and stops at
        # the first match on every dialect (MariaDB scans the whole range for the MIN form).
        sql = self._statement(
            kind,
            condition,
            1,
            lambda: (
                f"SELECT execution_time FROM {self.table_name} WHERE picked = :false{condition} "
                f"ORDER BY execution_time ASC{self.dialect.limit(1)}"
            ),
        )
        with self._reading() as conn:
            value = conn.execute(sql, {"false": self.dialect.encode_bool(False), **params}).scalar()
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
            version = str(conn.exec_driver_sql(query).scalar())
        self.server_version = version
        return self.dialect.supports_skip_locked(version)

    def server_description(self) -> str:
        version = self.server_version
        return self.dialect.name if version is None else f"{self.dialect.name} server {version}"

    def lock_and_fetch(self, now: datetime, limit: int) -> list[Execution]:
        """Claim up to ``limit`` due rows at once with ``FOR UPDATE SKIP LOCKED``.

        Only rows of tasks this process knows: a claim of another application's row (Java's, a
        newer release's) would have to be given back, bumping its version under the feet of
        whoever is reading or cancelling it. Such rows are met by :meth:`record_unknown_due`.
        """
        if not self.dialect.supports_lock_and_fetch:
            raise NotImplementedError(f"{self.dialect.name} does not support lock-and-fetch")
        if not self.resolver.claimable_names():
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
        single = d.lock_and_fetch_claim(
            self.table_name,
            self.columns,
            f"picked = :false AND execution_time <= :now{clause}",
            self._order_due,
            limit,
        )
        if single is not None:
            sql = self._statement("lock_and_fetch", clause, limit, lambda: single)
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
                if len(candidates) == 1:
                    [one] = candidates
                    key = {"task_name": one.task_name, "task_instance": one.instance_id}
                    updated = conn.execute(self._sql_claim_key, {**params, **key}).rowcount
                else:
                    update = self._sql_claim_keys.bindparams(
                        sa.bindparam(
                            "keys", [(e.task_name, e.instance_id) for e in candidates], expanding=True
                        )
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
        # a paused task is known: its due rows are not this look's business
        known, params = self._known_names(paused_too=True) if self.resolver.tasks else ("", {})
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
            self.resolver.add_unresolved(name, d.decode_required_time(execution_time))
        return len(rows)

    def unpick(self, executions: Sequence[Execution]) -> int:
        """Release picked rows at their version (claims given back at shutdown, unknown tasks
        met by the single-statement lock-and-fetch); how many were released.

        One connection for all of them, and the first failure ends it with one log line: during
        an outage every further try would fail the same way. A row not released stays picked
        and another instance revives it once its heartbeat is older than the dead window."""
        released = 0
        try:
            with self._one() as conn:
                for e in executions:
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
                    if count == 1:
                        released += 1
                    else:
                        log.error("failed to release %s (it was not picked at version %d)", e, e.version)
        except Exception as exc:
            # without autocommit the whole transaction rolled back: none of them was released
            released = released if self._autocommit is not None else 0
            left = len(executions) - released
            if is_database_error(exc):
                log.warning(
                    "could not release %d picked execution(s) (%s); they are revived as dead executions",
                    left,
                    describe(exc),
                )
            else:
                log.exception("could not release %d picked execution(s)", left)
        return released
