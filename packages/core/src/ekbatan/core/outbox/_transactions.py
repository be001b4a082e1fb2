"""One action's transactions: at most one per shard, each with an ORM ``Session`` bound to it.

A shard's transaction opens the first time the action touches that shard — when it reads
through ``plan.session(shard)`` or when its planned changes are applied — on a new connection of
the shard's primary, through the shard's :class:`TransactionManager` (so
``manager.current_connection()`` is that connection while the action runs).

Every statement that writes on a connection (see :mod:`ekbatan.core.outbox._writes`), whether
from the plan, an ORM flush or a statement run directly on the session or connection, marks
its shard as written; that is how a write made behind the plan's back still counts for the
cross-shard rule and still gets its sentinel row.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from ekbatan.core.outbox._errors import PartiallyCommittedError
from ekbatan.core.outbox._writes import changes_so_far, execution_writes
from ekbatan.core.persistence._transaction_manager import TransactionManager
from ekbatan.core.sharding._registry import DatabaseRegistry
from ekbatan.core.sharding._shard_identifier import ShardIdentifier

log = logging.getLogger("ekbatan.core.outbox.transactions")


@dataclass
class ShardTransaction:
    shard: ShardIdentifier
    manager: TransactionManager
    context: AbstractContextManager[sa.Connection]
    connection: sa.Connection
    session: Session
    changes_at_open: int | None = None
    written: bool = False
    finished: bool = False

    def settle_written(self) -> bool:
        """``written``, also counting rows the driver saw change under a row-returning statement."""
        if not self.written and self.changes_at_open is not None and not self.finished:
            changes = changes_so_far(self.connection.connection.dbapi_connection)
            self.written = changes is not None and changes != self.changes_at_open
        return self.written


def _has_pending(session: Session) -> bool:
    return bool(session.new or session.deleted or any(session.is_modified(o) for o in session.dirty))


class ShardTransactions:
    """The open transactions of one action execution, in the order they were opened."""

    def __init__(self, registry: DatabaseRegistry) -> None:
        self._registry = registry
        self._open: dict[ShardIdentifier, ShardTransaction] = {}

    def session(self, shard: ShardIdentifier) -> Session:
        """The shard's session, opening its transaction on first use (``shard`` must be registered)."""
        return self.open(shard).session

    def open(self, shard: ShardIdentifier) -> ShardTransaction:
        current = self._open.get(shard)
        if current is not None:
            return current
        manager = self._registry.transaction_manager(shard)
        context = manager.transaction()
        connection = context.__enter__()
        try:
            session = Session(
                bind=connection,
                join_transaction_mode="rollback_only",
                expire_on_commit=False,
            )
            opened = ShardTransaction(
                shard,
                manager,
                context,
                connection,
                session,
                changes_at_open=changes_so_far(connection.connection.dbapi_connection),
            )

            def mark_written(
                conn: Any, cursor: Any, statement: str, parameters: Any, execution: Any, executemany: bool
            ) -> None:
                if not opened.written and execution_writes(execution, cursor):
                    opened.written = True

            event.listen(connection, "after_cursor_execute", mark_written)
        except BaseException as error:
            context.__exit__(type(error), error, error.__traceback__)
            raise
        self._open[shard] = opened
        return opened

    def shard_of(self, session: Session | None) -> ShardIdentifier | None:
        """The shard whose session is ``session``, if it is one of this action's sessions."""
        if session is None:
            return None
        for shard, opened in self._open.items():
            if opened.session is session:
                return shard
        return None

    def written_shards(self) -> list[ShardIdentifier]:
        """Shards written to directly (not through the plan), or whose session holds unflushed changes."""
        return [
            shard
            for shard, opened in self._open.items()
            if opened.settle_written() or _has_pending(opened.session)
        ]

    def commit_all(self, *, action_name: str, action_id: uuid.UUID) -> None:
        """Commit every open transaction, the last opened first (transactions unwind in reverse).

        If a commit fails after another shard with writes already committed, the remaining
        ones are rolled back and :class:`PartiallyCommittedError` is raised (logged CRITICAL).
        """
        committed: list[ShardIdentifier] = []
        pending = list(reversed(self._open.values()))
        for index, opened in enumerate(pending):
            try:
                self._finish(opened, None)
            except BaseException as error:
                rest = pending[index + 1 :]
                self._rollback(rest, error)
                if committed:
                    partial = PartiallyCommittedError(
                        action_name,
                        action_id,
                        committed,
                        opened.shard,
                        [o.shard for o in rest if o.written],
                    )
                    log.critical("%s", partial)
                    raise partial from error
                raise
            if opened.written:
                committed.append(opened.shard)

    def rollback_all(self, error: BaseException) -> None:
        """Roll back every transaction still open, the last opened first."""
        self._rollback(list(reversed(self._open.values())), error)

    def _rollback(self, transactions: list[ShardTransaction], error: BaseException) -> None:
        for opened in transactions:
            try:
                self._finish(opened, error)
            except BaseException as rollback_error:
                if rollback_error is not error:
                    error.add_note(
                        f"rolling back shard {opened.shard} also failed: "
                        f"{type(rollback_error).__name__}: {rollback_error}"
                    )

    @staticmethod
    def _finish(opened: ShardTransaction, error: BaseException | None) -> None:
        if opened.finished:
            return
        opened.finished = True
        try:
            opened.session.close()
        finally:
            if error is None:
                opened.context.__exit__(None, None, None)
            else:
                opened.context.__exit__(type(error), error, error.__traceback__)
