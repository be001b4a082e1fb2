"""Per-execution single-row writes sent straight through psycopg on PostgreSQL.

A fetch-mode claim (one ``UPDATE`` per execution) and a strict-mode completion (one
autocommit ``DELETE`` per execution) are the engine's only statements that run once for every
execution. Through SQLAlchemy each costs about 50 µs of Python more than psycopg's own call
(the pool's checkout and return events, setting and resetting autocommit, the execution
context): a third of all the Python a strict execution costs, which is what several scheduler
processes sharing a few cores run out of. So on PostgreSQL these statements go through the
pooled DBAPI connection directly, with three guards:

* psycopg only (the statements are rewritten to its placeholders);
* only while nobody listens to the engine's cursor events: tracing, statement counters and
  ``handle_error`` hooks see every statement, because with any such listener the ordinary
  SQLAlchemy path is taken;
* a driver error is raised as SQLAlchemy's ``DBAPIError``, as the SQLAlchemy path would raise
  it (deadlock retries and failure handling do not tell the two paths apart), and a connection
  the dialect finds disconnected is invalidated instead of going back to the pool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


def to_pyformat(sql: str) -> str:
    """``:name`` placeholders of an engine statement as psycopg's ``%(name)s``."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


def driver_path_available(engine: sa.Engine) -> bool:
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"


class DriverStatement:
    """One autocommit statement run on a pooled connection's psycopg connection."""

    __slots__ = ("_engine", "sql")

    def __init__(self, engine: sa.Engine, sql: str) -> None:
        self._engine = engine
        self.sql = to_pyformat(sql)

    @property
    def usable(self) -> bool:
        """False while any cursor-level event listener is registered on the engine."""
        dispatch = self._engine.dispatch
        return not (
            dispatch.before_cursor_execute
            or dispatch.after_cursor_execute
            or self._engine.dialect.dispatch.handle_error
        )

    def rowcount(self, params: Mapping[str, Any]) -> int:
        raw = self._engine.raw_connection()
        try:
            driver = raw.driver_connection
            try:
                driver.autocommit = True
                try:
                    return driver.execute(self.sql, params).rowcount
                finally:
                    driver.autocommit = False
            except self._engine.dialect.loaded_dbapi.Error as exc:
                disconnected = self._engine.dialect.is_disconnect(exc, raw.dbapi_connection, None)
                if disconnected:
                    raw.invalidate(exc)
                raise DBAPIError.instance(
                    self.sql,
                    dict(params),
                    exc,
                    self._engine.dialect.loaded_dbapi.Error,
                    connection_invalidated=disconnected,
                    dialect=self._engine.dialect,
                ) from exc
        finally:
            raw.close()
