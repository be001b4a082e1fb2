from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any, ClassVar

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect

#: the first releases with ``FOR UPDATE SKIP LOCKED``
MYSQL_SKIP_LOCKED = (8, 0, 1)
MARIADB_SKIP_LOCKED = (10, 6, 0)
#: the server's ``ER_DUP_ENTRY``
_ER_DUP_ENTRY = 1062
#: the server's ``ER_LOCK_WAIT_TIMEOUT``
_ER_LOCK_WAIT_TIMEOUT = 1205


def _server_error_code(error: BaseException) -> int | None:
    """The MySQL error number of a driver error SQLAlchemy wrapped (None: not such an error)."""
    args: tuple[Any, ...] = getattr(getattr(error, "orig", None), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def server_has_skip_locked(server_version: str) -> bool:
    """``SELECT VERSION()`` of a MySQL or MariaDB server → whether it has ``SKIP LOCKED``.

    MariaDB reports e.g. ``10.11.6-MariaDB-0+deb12u1`` (older releases behind a replication
    prefix: ``5.5.5-10.4.32-MariaDB``); MySQL e.g. ``8.0.35`` or ``5.7.44-log``. A string not
    understood counts as without: fetch works on every server.
    """
    numbers = [tuple(int(n) for n in m) for m in re.findall(r"(\d+)\.(\d+)\.(\d+)", server_version)]
    if not numbers:
        return False
    if "mariadb" not in server_version.lower():
        return numbers[0] >= MYSQL_SKIP_LOCKED
    if numbers[0] == (5, 5, 5) and len(numbers) > 1:
        numbers.pop(0)
    return numbers[0] >= MARIADB_SKIP_LOCKED


class MySqlDialect(SqlDialect):
    """MySQL 8: UTC wall-clock ``DATETIME(6)`` values with the session pinned to ``+00:00``.

    The pin matters for tables still carrying the older ``TIMESTAMP(6)`` columns, which the
    server converts through the session time zone; ``DATETIME(6)`` stores what is bound.
    """

    dialect: ClassVar[Dialect] = Dialect.MYSQL
    supports_lock_and_fetch = True
    supports_delete_returning = False
    # db-scheduler's table declares `task_data blob`; a longer value fails in strict mode and is
    # cut short (the data silently corrupted) in non-strict mode, so it is refused before writing.
    max_task_data_bytes = 65_535
    task_data_column = "task_data blob"

    def encode_time(self, instant: datetime | None) -> Any:
        if instant is None:
            return None
        return instant.astimezone(UTC).replace(tzinfo=None)

    def without_estimate(self, condition: str) -> str:
        # A process that knows one task name claims with `task_name IN (:k0)`, an equality on the
        # primary key's first column. On a table whose statistics are stale (a burst of
        # scheduling, InnoDB's background recalculation not yet run) the optimizer takes that
        # for a key lookup, reads every row of the name and sorts them to return the first few
        # — and FOR UPDATE locks each row it reads: 190 ms and 300,000 row locks for a claim of
        # 10 at 300,000 due, enough lock memory at a million for four claimers to fill a 128 MB
        # buffer pool and stop the server. Inside COALESCE the name is no key condition, and
        # the claim walks execution_time_idx and stops at its limit (0.6 ms, 10 rows locked).
        return f"COALESCE({condition}, 0)"

    def insert_if_absent(self, insert: str) -> str | None:
        # INSERT IGNORE would also swallow truncation and other errors, so a duplicate is
        # detected from the key violation instead (it leaves the transaction usable here).
        return None

    def is_duplicate_key(self, error: BaseException) -> bool:
        return _server_error_code(error) == _ER_DUP_ENTRY

    def create_index_if_not_exists(self, statement: str) -> str:
        return statement  # no IF NOT EXISTS for CREATE INDEX on MySQL

    def lock_and_fetch_select_tail(self, n: int) -> str:
        # MySQL and MariaDB put the locking clause after LIMIT.
        return f" LIMIT {int(n)} FOR UPDATE SKIP LOCKED"

    def bounded_lock_wait(self, seconds: float) -> tuple[str | None, str | None]:
        # whole seconds only; DEFAULT puts the session back to the server's own setting
        return (
            f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(seconds))}",
            "SET SESSION innodb_lock_wait_timeout = DEFAULT",
        )

    def is_lock_timeout(self, error: BaseException) -> bool:
        return _server_error_code(error) == _ER_LOCK_WAIT_TIMEOUT

    def claim_transaction_start(self) -> str | None:
        # READ COMMITTED for the claim's one transaction. Under REPEATABLE READ InnoDB keeps a
        # lock on every row the scan examined (the picked rows other workers are finishing, too)
        # and the key-list UPDATE waits on rows outside its list; the DELETE/UPDATE completing
        # such a row then deadlocks with the claim. SET TRANSACTION applies to the next
        # transaction only: one round trip, where SQLAlchemy's isolation_level option spends four
        # (SET SESSION and COMMIT at checkout, again at check-in).
        return "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

    def add_priority_column(self, table: str, index: str) -> list[str]:
        return [
            f"ALTER TABLE {table} ADD COLUMN priority SMALLINT, "
            f"ADD INDEX {index} (priority DESC, execution_time ASC)"
        ]

    def server_version_query(self) -> str | None:
        return "SELECT VERSION()"

    def supports_skip_locked(self, server_version: str) -> bool:
        # A mysql+pymysql URL may well reach a MariaDB server: the version string tells.
        return server_has_skip_locked(server_version)

    def prepare_connection(self, dbapi_connection: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SET time_zone = '+00:00'")
        finally:
            cursor.close()


class MariaDbDialect(MySqlDialect):
    """MariaDB: as MySQL; ``SKIP LOCKED`` exists from 10.6 on."""

    dialect: ClassVar[Dialect] = Dialect.MARIADB
    supports_delete_returning = True  # MariaDB has it; MySQL 8 does not
