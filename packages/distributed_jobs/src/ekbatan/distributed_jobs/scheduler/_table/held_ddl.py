"""The two tables of our own beside ``scheduled_tasks``: held executions and task pauses.

``scheduled_tasks`` stays exactly as db-scheduler creates it, so a Java scheduler can share
it. What it has no column for lives next to it, named after it:

* ``<table>_held`` — executions taken out of the table and kept: *dead* (their retries ran
  out, kept with the last error) or *paused* one by one. A row here is invisible to every
  poller, ours and Java's, because it is not in ``scheduled_tasks`` any more.
* ``<table>_pauses`` — task names paused as a whole; pollers of this engine leave due rows of
  those names where they are.
"""

from __future__ import annotations

from ekbatan.distributed_jobs.scheduler.dialects import Dialect

#: the types per dialect, matching the ones db-scheduler's DDL gives the same values there
_TYPES: dict[Dialect, dict[str, str]] = {
    Dialect.POSTGRESQL: {"key": "text", "data": "bytea", "time": "timestamp with time zone", "text": "text"},
    Dialect.MYSQL: {"key": "varchar(100)", "data": "blob", "time": "datetime(6)", "text": "text"},
    Dialect.MARIADB: {"key": "varchar(100)", "data": "blob", "time": "datetime(6)", "text": "text"},
    Dialect.SQLITE: {"key": "varchar(100)", "data": "blob", "time": "TIMESTAMP", "text": "text"},
}

#: the longest table name PostgreSQL and MySQL keep whole (longer ones are cut or refused)
_MAX_NAME = 63
_HELD_SUFFIX = "_held"
_PAUSES_SUFFIX = "_pauses"


def held_table_name(table_name: str) -> str:
    """``<table>_held``: the dead and individually paused executions of ``table_name``."""
    return _suffixed(table_name, _HELD_SUFFIX)


def pauses_table_name(table_name: str) -> str:
    """``<table>_pauses``: the task names of ``table_name`` paused as a whole."""
    return _suffixed(table_name, _PAUSES_SUFFIX)


def _suffixed(table_name: str, suffix: str) -> str:
    schema, dot, table = table_name.rpartition(".")
    if len(table) + len(suffix) > _MAX_NAME:
        raise ValueError(
            f"table name {table_name!r} is too long to name its companion table {table + suffix!r} "
            f"(at most {_MAX_NAME} characters); use a table name of at most {_MAX_NAME - len(_PAUSES_SUFFIX)} "
            "characters"
        )
    return f"{schema}{dot}{table}{suffix}"


def held_ddl_statements(dialect: Dialect | str, table_name: str) -> list[str]:
    """The statements creating ``<table>_held`` (with its index) and ``<table>_pauses``."""
    types = _TYPES[Dialect(str(dialect))]
    held = held_table_name(table_name)
    pauses = pauses_table_name(table_name)
    key, time, text = types["key"], types["time"], types["text"]
    index = f"{held.rpartition('.')[2]}_state_idx"
    # MySQL has no CREATE INDEX IF NOT EXISTS: there the index is declared inside the table, as
    # db-scheduler's own MySQL DDL does, so a re-run migration creates nothing twice
    inline = Dialect(str(dialect)) in (Dialect.MYSQL, Dialect.MARIADB)
    statements = [
        f"CREATE TABLE {held} ("
        f"task_name {key} NOT NULL, "
        f"task_instance {key} NOT NULL, "
        "state varchar(16) NOT NULL, "
        f"task_data {types['data']}, "
        f"execution_time {time} NOT NULL, "
        f"last_success {time} NULL, "
        f"last_failure {time} NULL, "
        "consecutive_failures INT, "
        "priority SMALLINT, "
        f"held_at {time} NOT NULL, "
        "held_by varchar(255), "
        f"reason {text}, "
        "error_class varchar(255), "
        f"error_message {text}, "
        f"error_traceback {text}, "
        "PRIMARY KEY (task_name, task_instance)" + (f", INDEX {index} (state, held_at))" if inline else ")"),
        f"CREATE TABLE {pauses} ("
        f"task_name {key} NOT NULL, "
        f"paused_at {time} NOT NULL, "
        "paused_by varchar(255), "
        f"reason {text}, "
        "PRIMARY KEY (task_name))",
    ]
    if not inline:
        statements.insert(1, f"CREATE INDEX {index} ON {held} (state, held_at)")
    return statements
