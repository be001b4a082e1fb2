"""The seam between the engine and one database family.

Each backend knows how its driver wants timestamps and booleans bound and read back (so a
row written by Java's db-scheduler reads the same here), how a limit is spelled, whether it
can lock-and-fetch with ``SKIP LOCKED``, and what a fresh connection needs.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar


class Dialect(enum.StrEnum):
    POSTGRESQL = "postgresql"
    MARIADB = "mariadb"
    MYSQL = "mysql"
    SQLITE = "sqlite"


class SqlDialect:
    """Base behaviour; subclasses override what their database does differently."""

    dialect: ClassVar[Dialect]
    #: ``FOR UPDATE SKIP LOCKED`` claims are possible (lock-and-fetch polling strategy)
    supports_lock_and_fetch: ClassVar[bool] = False
    #: the whole lock-and-fetch happens in one ``UPDATE … RETURNING`` statement
    single_statement_lock_and_fetch: ClassVar[bool] = False
    #: ``DELETE … RETURNING`` reports which rows a multi-row delete removed
    supports_delete_returning: ClassVar[bool] = True
    #: the finest instant a stored time keeps; a finer one is truncated on the way in
    time_resolution: ClassVar[timedelta] = timedelta(microseconds=1)
    #: the most bytes ``task_data`` holds, with the column type named in errors (None: no limit of ours)
    max_task_data_bytes: ClassVar[int | None] = None
    task_data_column: ClassVar[str] = "task_data"

    @property
    def name(self) -> str:
        return self.dialect.value

    # -- value encoding -------------------------------------------------------------------
    def encode_time(self, instant: datetime | None) -> Any:
        return instant

    def decode_time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def encode_bool(self, value: bool) -> Any:
        return value

    def decode_bool(self, value: Any) -> bool:
        return bool(value)

    def decode_bytes(self, value: Any) -> bytes | None:
        if value is None:
            return None
        return bytes(value)

    # -- SQL spelling ---------------------------------------------------------------------
    def limit(self, n: int) -> str:
        return f" LIMIT {int(n)}"

    def priority_order(self) -> str:
        # db-scheduler's order, word for word, so both sides of a shared table agree and the
        # query can walk priority_execution_time_idx. A NULL priority therefore sorts as each
        # database puts NULL under DESC: first on PostgreSQL, last on MySQL, MariaDB, SQLite.
        return "priority DESC, execution_time ASC"

    def add_priority_column(self, table: str, index: str) -> list[str]:
        """The DDL adding db-scheduler's optional ``priority`` column and its index."""
        return [
            f"ALTER TABLE {table} ADD COLUMN priority SMALLINT",
            f"CREATE INDEX {index} ON {table} (priority DESC, execution_time ASC)",
        ]

    def supports_skip_locked(self, server_version: str) -> bool:
        """Whether a server reporting ``server_version`` has ``FOR UPDATE SKIP LOCKED``."""
        return self.supports_lock_and_fetch

    def server_version_query(self) -> str | None:
        """The statement reading the server's version (None: nothing to ask)."""
        return None

    def lock_and_fetch_select_tail(self, n: int) -> str:
        raise NotImplementedError(f"{self.name} cannot lock-and-fetch")

    def claim_transaction_start(self) -> str | None:
        """The statement opening a two-statement lock-and-fetch claim's transaction (None: none)."""
        return None

    # -- connection setup -----------------------------------------------------------------
    def prepare_connection(self, dbapi_connection: Any) -> None:
        """Called once per new DBAPI connection the engine hands out."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"
