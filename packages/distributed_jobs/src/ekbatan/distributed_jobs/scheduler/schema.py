"""The ``scheduled_tasks`` table: DDL per dialect (shipped verbatim as package data) and an
idempotent creator.

The same statements are contributed to Ekbatan's framework migrations through the
``ekbatan.migrations`` entry point (:func:`migrations`), so there is one copy of the DDL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._table.held_ddl import (
    held_ddl_statements,
    held_table_name,
    history_ddl_statements,
    history_table_name,
    traces_ddl_statements,
    traces_table_name,
)
from ekbatan.distributed_jobs.scheduler.dialects import Dialect, SqlDialect, backend_for, resolve_dialect

DEFAULT_TABLE_NAME = "scheduled_tasks"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
_INDEXES = ("execution_time_idx", "last_heartbeat_idx", "priority_execution_time_idx")


def validate_table_name(name: str) -> str:
    """Accept ``table`` or ``schema.table`` made of lower-case letters, digits and underscores.

    The name is spliced into SQL text, so anything else is refused rather than quoted. Upper
    case is refused too: PostgreSQL folds an unquoted ``My_Tasks`` to ``my_tasks`` while its
    catalog lookups (and MySQL on Linux) do not, so the table would be created twice.
    """
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or name != name.lower():
        lower = f"; write {name.lower()!r}" if isinstance(name, str) and _IDENTIFIER.match(name) else ""
        raise ValueError(
            f"invalid table name {name!r}: use lower-case letters, digits and underscores, not starting "
            "with a digit, optionally schema-qualified — e.g. 'scheduled_tasks' or "
            f"'jobs.scheduled_tasks'{lower}"
        )
    return name


def verbatim_ddl(dialect: Dialect | str) -> str:
    """The DDL file shipped for ``dialect``, exactly as db-scheduler publishes it."""
    dialect = Dialect(str(dialect))
    return resources.files(__package__).joinpath("sql", f"{dialect.value}_tables.sql").read_text("utf-8")


def ddl_statements(dialect: Dialect | str, table_name: str = DEFAULT_TABLE_NAME) -> list[str]:
    """The statements creating the table (and its indexes) under ``table_name``.

    Under a custom table name the index names get the table's name as prefix, so two tables in
    one schema do not collide on PostgreSQL/SQLite, whose index names are schema-wide.
    """
    validate_table_name(table_name)
    text = "\n".join(
        line for line in verbatim_ddl(dialect).splitlines() if not line.lstrip().startswith("--")
    )
    if table_name != DEFAULT_TABLE_NAME:
        for index in _INDEXES:
            text = re.sub(rf"\b{index}\b", index_name(index, table_name), text)
        text = re.sub(rf"\b{DEFAULT_TABLE_NAME}\b", table_name, text)
    return [stmt.strip() for stmt in text.split(";") if stmt.strip()]


def index_name(index: str, table_name: str = DEFAULT_TABLE_NAME) -> str:
    """The name :func:`ddl_statements` gives ``index`` under ``table_name``."""
    return index if table_name == DEFAULT_TABLE_NAME else f"{table_name.replace('.', '_')}_{index}"


def priority_column_ddl(
    dialect: str | Dialect | SqlDialect, table_name: str = DEFAULT_TABLE_NAME
) -> list[str]:
    """The statements adding the optional ``priority`` column (and its index) to a table created
    without it, as db-scheduler's DDL declares them."""
    validate_table_name(table_name)
    backend = dialect if isinstance(dialect, SqlDialect) else backend_for(dialect)
    return backend.add_priority_column(table_name, index_name("priority_execution_time_idx", table_name))


def has_priority_column(connection: sa.Connection, table_name: str = DEFAULT_TABLE_NAME) -> bool:
    """Whether the table has db-scheduler's optional ``priority`` column (older tables lack it)."""
    schema, _, table = table_name.rpartition(".")
    columns = sa.inspect(connection).get_columns(table, schema=schema or None)
    return any(column["name"].lower() == "priority" for column in columns)


def table_exists(connection: sa.Connection, table_name: str = DEFAULT_TABLE_NAME) -> bool:
    schema, _, table = table_name.rpartition(".")
    return sa.inspect(connection).has_table(table, schema=schema or None)


def create_table(
    engine: sa.Engine,
    table_name: str = DEFAULT_TABLE_NAME,
    dialect: str | Dialect | SqlDialect | None = None,
) -> bool:
    """Create the table and its indexes unless the table exists, and its companion tables
    ``<table>_held``, ``<table>_pauses``, ``<table>_history`` and ``<table>_traces`` unless they exist; return
    whether it created ``table_name``."""
    backend = resolve_dialect(engine, dialect)
    created = False
    with engine.begin() as connection:
        if not table_exists(connection, table_name):
            for statement in ddl_statements(backend.dialect, table_name):
                connection.exec_driver_sql(statement)
            created = True
    create_companion_tables(engine, table_name, backend)
    return created


def create_companion_tables(
    engine: sa.Engine,
    table_name: str = DEFAULT_TABLE_NAME,
    dialect: str | Dialect | SqlDialect | None = None,
) -> None:
    """Create ``<table>_held``, ``<table>_pauses``, ``<table>_history`` and ``<table>_traces`` unless they exist
    (``ekbatan migrate`` creates them for the default table name)."""
    validate_table_name(table_name)
    backend = resolve_dialect(engine, dialect)
    with engine.begin() as connection:
        for exists, statements in (
            (held_table_name(table_name), held_ddl_statements),
            (history_table_name(table_name), history_ddl_statements),
            (traces_table_name(table_name), traces_ddl_statements),
        ):
            if not table_exists(connection, exists):
                for statement in statements(backend.dialect, table_name):
                    connection.exec_driver_sql(_if_not_exists(statement, backend.dialect.value))


def migrations() -> list[tuple[str, str, str, Callable[[str], list[str]]]]:
    """Contribution to ``ekbatan.migrations``: (component, version, description, statements)."""

    def statements(dialect: str) -> list[str]:
        created = ddl_statements(dialect)
        # Migrations must be re-runnable after a partial failure on MySQL/MariaDB, where DDL
        # auto-commits; the verbatim DDL gains IF NOT EXISTS here only.
        return [_if_not_exists(stmt, dialect) for stmt in created]

    def history(dialect: str) -> list[str]:
        return [_if_not_exists(stmt, dialect) for stmt in history_ddl_statements(dialect, DEFAULT_TABLE_NAME)]

    def traces(dialect: str) -> list[str]:
        return [_if_not_exists(stmt, dialect) for stmt in traces_ddl_statements(dialect, DEFAULT_TABLE_NAME)]

    def companions(dialect: str) -> list[str]:
        return [_if_not_exists(stmt, dialect) for stmt in held_ddl_statements(dialect, DEFAULT_TABLE_NAME)]

    return [
        ("scheduled_tasks", "0001", "db-scheduler's scheduled_tasks table", statements),
        ("scheduled_tasks", "0002", "held executions (dead letters, paused) and task pauses", companions),
        ("scheduled_tasks", "0003", "execution history", history),
        ("scheduled_tasks", "0004", "trace context of executions scheduled under a span", traces),
    ]


def _if_not_exists(statement: str, dialect: str) -> str:
    statement = re.sub(r"(?i)^create table ", "CREATE TABLE IF NOT EXISTS ", statement)
    return backend_for(dialect).create_index_if_not_exists(statement)
