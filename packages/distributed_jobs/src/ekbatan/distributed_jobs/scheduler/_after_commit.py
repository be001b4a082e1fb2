"""Run callbacks when the caller's transaction commits; forget them when it rolls back.

A task scheduled inside the caller's transaction is invisible to the poller until that
transaction commits, so waking the poller (and telling listeners "scheduled") must wait for
the commit. SQLAlchemy Core has no after-commit event: the engine-level ``commit`` event fires
just before the DBAPI commit, so the callbacks get told so and allow for it.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import event

_PENDING = "ekbatan_pending_after_commit"
_HOOKED = "_ekbatan_after_commit_hooks"


def _on_commit(connection: sa.Connection) -> None:
    for callback in connection.info.pop(_PENDING, ()):
        callback()


def _on_rollback(connection: sa.Connection) -> None:
    connection.info.pop(_PENDING, None)


def run_after_commit(connection: sa.Connection, callback: Callable[[], None]) -> None:
    """Call ``callback`` at the commit of ``connection``'s current transaction (or now, when
    it has none)."""
    if not connection.in_transaction():
        callback()
        return
    engine = connection.engine
    if not getattr(engine, _HOOKED, False):
        event.listen(engine, "commit", _on_commit)
        event.listen(engine, "rollback", _on_rollback)
        setattr(engine, _HOOKED, True)
    connection.info.setdefault(_PENDING, []).append(callback)
