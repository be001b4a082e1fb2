"""The seam between the engine and one database family.

Each backend knows how its driver wants timestamps and booleans bound and read back (so a
row written by Java's db-scheduler reads the same here), how a limit is spelled, whether it
can lock-and-fetch with ``SKIP LOCKED``, and what a fresh connection needs.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa


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
        instant: datetime = value
        if instant.tzinfo is None:
            return instant.replace(tzinfo=UTC)
        return instant.astimezone(UTC)

    def decode_required_time(self, value: Any) -> datetime:
        """A time from a NOT NULL column (``execution_time``)."""
        instant = self.decode_time(value)
        if instant is None:
            raise ValueError("execution_time is NULL, which the scheduled_tasks table does not allow")
        return instant

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

    def without_estimate(self, condition: str) -> str:
        """``condition`` spelled so that the planner neither seeks an index by it nor trusts a
        guess of how many rows it keeps (here: as is; a dialect whose planner goes astray
        overrides)."""
        return condition

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
        """The statement opening a two-statement lock-and-fetch claim's transaction, and a
        multi-row removal's, where rows they scan but do not change must not stay locked
        (None: none)."""
        return None

    def bounded_lock_wait(self, seconds: float) -> tuple[str | None, str | None]:
        """How a transaction waits at most ``seconds`` for a row lock another transaction holds:
        a statement run at its start, and one run on its connection once it ended, to put the
        session back (None: nothing to run; the database has no such bound)."""
        return None, None

    def is_lock_timeout(self, error: BaseException) -> bool:
        """Whether a driver error is a statement that gave up waiting for a row lock."""
        return False

    # -- statements that differ between databases -----------------------------------------
    #: a one-statement write runs on an autocommit connection (no BEGIN/COMMIT round trips)
    autocommit_single_statements: ClassVar[bool] = False
    #: a notification channel can tell pollers of every scheduled due time
    supports_notify: ClassVar[bool] = False

    def insert_if_absent(self, insert: str) -> str | None:
        """``insert`` turned into a no-op on an existing key (None: the database has no such
        form that is safe, and a duplicate is told by :meth:`is_duplicate_key` instead)."""
        return f"{insert} ON CONFLICT (task_name, task_instance) DO NOTHING"

    def is_duplicate_key(self, error: BaseException) -> bool:
        """Whether a driver error is the key violation of an insert that lost a race."""
        return False

    def notify(self, channel: str) -> str:
        """A statement sending ``:payload`` on ``channel`` when its transaction commits."""
        raise NotImplementedError(f"{self.name} has no notification channel")

    def insert_and_notify(self, insert: str, channel: str) -> str:
        """``insert`` if absent, notifying ``channel`` with ``:payload`` only when it inserted:
        one statement whose row count tells whether it did."""
        raise NotImplementedError(f"{self.name} has no notification channel")

    def insert_many(self, table: str, columns: Sequence[str]) -> sa.TextClause | None:
        """One statement inserting every row of a batch, bound by :meth:`insert_many_params`
        (None: the batch goes as an executemany of the one-row insert)."""
        return None

    def insert_many_params(self, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} inserts a batch row by row")

    def remove_many(self, table: str) -> sa.TextClause:
        """Delete rows at their versions, returning the keys deleted. One statement text
        whatever the batch size, so it is compiled once; bound by :meth:`remove_many_params`."""
        return sa.text(
            f"DELETE FROM {table} WHERE (task_name, task_instance, version) IN :keys "
            "RETURNING task_name, task_instance"
        ).bindparams(sa.bindparam("keys", expanding=True))

    def remove_many_params(self, keys: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
        return {"keys": list(keys)}

    def lock_and_fetch_claim(
        self, table: str, columns: str, condition: str, order: str, n: int
    ) -> str | None:
        """The whole lock-and-fetch claim of up to ``n`` due rows matching ``condition`` as one
        statement returning ``columns`` (None: it takes a locking select and an update)."""
        return None

    def claim_one_locked(self, table: str, columns: str, key: str) -> str:
        """Claim the row ``key`` names if it is due and unpicked, skipping it when another
        transaction holds it; returns ``columns`` of the claimed row."""
        raise NotImplementedError(f"{self.name} cannot claim a single row with SKIP LOCKED")

    def create_index_if_not_exists(self, statement: str) -> str:
        """A ``CREATE INDEX`` made re-runnable, where the database can say so."""
        return re.sub(r"(?i)^create index ", "CREATE INDEX IF NOT EXISTS ", statement)

    # -- connection setup -----------------------------------------------------------------
    def prepare_connection(self, dbapi_connection: Any) -> None:
        """Called once per new DBAPI connection the engine hands out."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"
