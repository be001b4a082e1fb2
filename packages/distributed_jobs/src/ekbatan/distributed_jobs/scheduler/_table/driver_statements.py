"""Per-execution single-row writes sent straight through psycopg on PostgreSQL.

A fetch-mode claim (one ``UPDATE`` per execution), a strict-mode completion (one
autocommit ``DELETE`` per execution) and the insert of one execution scheduled on its own are
the statements that run once for every execution. (The claim of an execution a notification
named runs here too, on the listener's own connection: see ``_polling/notified_claims.py``.) Through
SQLAlchemy each costs about 50 µs of Python more than psycopg's own call (the pool's checkout
and return events, setting and resetting autocommit, the execution context): a third of all
the Python a strict execution costs, which is what several scheduler processes sharing a few
cores run out of. So on PostgreSQL these statements go through the
pooled DBAPI connection directly, with three guards:

* psycopg only (the statements are rewritten to its placeholders);
* only while nothing watches the engine's statements (execute or cursor listeners,
  ``handle_error`` or ``do_execute`` hooks, ``echo``): tracing, statement counters and SQL
  logs see every statement, because with any of them the ordinary SQLAlchemy path is taken;
* a driver error is raised as SQLAlchemy's ``DBAPIError``, as the SQLAlchemy path would raise
  it (deadlock retries and failure handling do not tell the two paths apart); on a
  disconnect the pool is invalidated as SQLAlchemy does it, and the connection goes back to
  the pool with the autocommit setting it came with.
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
    # psycopg (3) is a PostgreSQL driver only; psycopg2 reports itself as "psycopg2"
    return engine.dialect.driver == "psycopg"


class DriverStatement:
    """One autocommit statement run on a pooled connection's psycopg connection."""

    __slots__ = ("_engine", "sql")

    def __init__(self, engine: sa.Engine, sql: str) -> None:
        self._engine = engine
        self.sql = to_pyformat(sql)

    @property
    def usable(self) -> bool:
        """False while anything watches the engine's statements: execute or cursor listeners,
        ``handle_error`` or ``do_execute`` hooks, or SQL echo."""
        engine = self._engine
        dispatch, dialect_dispatch = engine.dispatch, engine.dialect.dispatch
        return not (
            engine.echo
            or dispatch.before_execute
            or dispatch.after_execute
            or dispatch.before_cursor_execute
            or dispatch.after_cursor_execute
            or dialect_dispatch.handle_error
            or dialect_dispatch.do_execute
        )

    def rowcount(self, params: Mapping[str, Any]) -> int:
        engine = self._engine
        dbapi_error = engine.dialect.loaded_dbapi.Error
        try:
            raw = engine.raw_connection()
        except dbapi_error as exc:  # the server is unreachable: as SQLAlchemy would raise it
            raise DBAPIError.instance(
                None, None, exc, dbapi_error, hide_parameters=engine.hide_parameters, dialect=engine.dialect
            ) from exc
        try:
            return self._run(raw, params)
        except dbapi_error as exc:
            disconnected = engine.dialect.is_disconnect(exc, raw.dbapi_connection, None)
            if disconnected:
                # As SQLAlchemy does: this connection and every older one in the pool are
                # stale after a server restart, not only the one that noticed.
                engine.pool._invalidate(raw, exc)
            raise DBAPIError.instance(
                self.sql,
                dict(params),
                exc,
                dbapi_error,
                hide_parameters=engine.hide_parameters,
                connection_invalidated=disconnected,
                dialect=engine.dialect,
            ) from exc
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted mid-statement: state unknown
                raw.invalidate(exc)
            raise
        finally:
            raw.close()

    def first_row_on(self, connection: Any, params: Mapping[str, Any]) -> Any:
        """Run on a psycopg connection the caller owns and keeps in autocommit (not a pooled
        one); its first row, or None. Errors are the driver's own: the owner of the connection
        decides what a broken one means."""
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            return cursor.fetchone()

    def _run(self, raw: Any, params: Mapping[str, Any]) -> int:
        driver = raw.driver_connection
        was_autocommit = driver.autocommit
        if not was_autocommit:
            driver.autocommit = True
        try:
            with driver.cursor() as cursor:
                cursor.execute(self.sql, params)
                count: int = cursor.rowcount
                return count
        finally:
            # Back as the pool handed it over (an AUTOCOMMIT engine keeps its autocommit). A
            # broken connection is left alone: touching it would hide the statement's error.
            if not was_autocommit and not driver.broken and not driver.closed:
                driver.autocommit = False
