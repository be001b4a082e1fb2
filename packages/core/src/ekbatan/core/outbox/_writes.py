"""Whether a statement run on an action's connection wrote: what makes a shard "written".

A SQLAlchemy construct is judged by what it is, not by its SQL: ``insert``/``update``/
``delete`` (with or without ``RETURNING``, whatever CTEs precede them), DDL, and any statement
holding a data-modifying CTE (``WITH x AS (INSERT … RETURNING …) SELECT …`` on PostgreSQL).
A ``SELECT … FOR UPDATE`` is a read: it locks rows until the transaction ends and changes
none, so there is nothing on that shard a partial commit could leave behind and nothing a
sentinel row would record.

``text()`` and driver SQL carry no structure, so the driver's report after execution decides:
on PostgreSQL the server's command tag (``INSERT 0 1``, ``SELECT 2``, ``SET``); elsewhere a
statement that returns no result set is a write. On SQLite a row-returning statement that
changed rows (``INSERT … RETURNING``) is caught by the connection's change counter.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import ExecutionContext
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import ClauseElement, TextClause
from sqlalchemy.sql.selectable import TextualSelect

# PostgreSQL command tags (counts removed) of statements that change no data. Any other tag
# (INSERT, UPDATE, DELETE, MERGE, COPY, CALL, DO, DDL, …) counts as a write.
_POSTGRES_READ_TAGS = frozenset(
    {
        "SELECT",
        "SHOW",
        "SET",
        "RESET",
        "BEGIN",
        "START TRANSACTION",
        "SAVEPOINT",
        "RELEASE",
        "ROLLBACK",
        "LOCK TABLE",
        "DECLARE CURSOR",
        "FETCH",
        "MOVE",
        "CLOSE CURSOR",
        "EXPLAIN",
        "LISTEN",
        "UNLISTEN",
        "PREPARE",
        "DEALLOCATE",
        "DEALLOCATE ALL",
    }
)


def construct_writes(statement: ClauseElement) -> bool:
    """True for a DML construct, or one with DML anywhere inside (a data-modifying CTE)."""
    return any(getattr(element, "is_dml", False) for element in visitors.iterate(statement))


def execution_writes(context: ExecutionContext | None, cursor: Any) -> bool:
    """Whether the statement just executed with ``context`` on ``cursor`` wrote."""
    compiled = getattr(context, "compiled", None)
    if isinstance(context, DefaultExecutionContext) and context.isddl:
        return True
    if compiled is not None and not isinstance(compiled.statement, (TextClause, TextualSelect)):
        return construct_writes(compiled.statement)
    return _driver_reports_write(cursor)


def _driver_reports_write(cursor: Any) -> bool:
    status = getattr(cursor, "statusmessage", None)
    if isinstance(status, str):
        command = " ".join(word for word in status.split() if not word.isdigit())
        if command == "SELECT":
            # CREATE TABLE AS and SELECT INTO report SELECT too, but return no rows.
            return cursor.description is None
        return command not in _POSTGRES_READ_TAGS
    return cursor.description is None


def changes_so_far(dbapi_connection: Any) -> int | None:
    """The driver's count of rows changed on this connection, where it keeps one (SQLite)."""
    total = getattr(dbapi_connection, "total_changes", None)
    return total if isinstance(total, int) else None
