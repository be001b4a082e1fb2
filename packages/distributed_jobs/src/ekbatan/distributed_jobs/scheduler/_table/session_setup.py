"""Per-connection session settings the engine relies on, applied to any engine it is given.

A checkout listener (not only "connect") so that connections pooled before the scheduler was
built get the settings too; the flag in ``connection_record.info`` makes it once per DBAPI
connection.
"""

from __future__ import annotations

import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from ekbatan.distributed_jobs.scheduler.dialects import SqlDialect

_FLAG = "ekbatan_scheduler_session"
#: pools that already run the dialect's session setup on checkout (weak: a disposed engine's
#: pool is not kept alive by having been set up)
_SET_UP: weakref.WeakSet[sa.pool.Pool] = weakref.WeakSet()


def install_session_setup(engine: sa.Engine, dialect: SqlDialect) -> None:
    pool = engine.pool
    if pool in _SET_UP:
        return

    def on_checkout(dbapi_connection: Any, connection_record: Any, _proxy: Any) -> None:
        if not connection_record.info.get(_FLAG):
            dialect.prepare_connection(dbapi_connection)
            connection_record.info[_FLAG] = True

    event.listen(pool, "checkout", on_checkout)
    _SET_UP.add(pool)
