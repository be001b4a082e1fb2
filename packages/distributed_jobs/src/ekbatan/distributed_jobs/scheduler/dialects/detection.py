"""Pick the dialect from the SQLAlchemy URL alone — never by opening a connection.

An application may start before its database is reachable; guessing from a failed connection
would leave the engine on SQL the server cannot parse, polling uselessly forever.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.mysql import MariaDbDialect, MySqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.postgresql import PostgreSqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.sqlite import SqliteDialect

_BACKENDS: dict[Dialect, type[SqlDialect]] = {
    Dialect.POSTGRESQL: PostgreSqlDialect,
    Dialect.MARIADB: MariaDbDialect,
    Dialect.MYSQL: MySqlDialect,
    Dialect.SQLITE: SqliteDialect,
}

_FAMILIES = {
    "postgresql": Dialect.POSTGRESQL,
    "postgres": Dialect.POSTGRESQL,
    "mariadb": Dialect.MARIADB,
    "mysql": Dialect.MYSQL,
    "sqlite": Dialect.SQLITE,
}


def dialect_from_url(url: str | URL) -> Dialect:
    """``postgresql+psycopg://…`` → POSTGRESQL, ``mariadb+pymysql://…`` → MARIADB, …

    A MariaDB server reached through a ``mysql+pymysql`` URL is treated as MySQL 8 (a URL
    cannot reveal the server); write ``mariadb+pymysql://`` or pass ``dialect="mariadb"``.
    """
    parsed = make_url(url) if isinstance(url, str) else url
    family = parsed.drivername.split("+", 1)[0].lower()
    try:
        return _FAMILIES[family]
    except KeyError:
        raise ValueError(
            f"cannot tell the database dialect from URL scheme {parsed.drivername!r}; supported: "
            "postgresql+psycopg://, mariadb+pymysql://, mysql+pymysql://, sqlite:///path — or pass "
            "dialect='postgresql'|'mariadb'|'mysql'|'sqlite' explicitly"
        ) from None


def backend_for(dialect: str | Dialect) -> SqlDialect:
    """The backend of a dialect named ``'postgresql'``, ``'mariadb'``, ``'mysql'`` or ``'sqlite'``."""
    try:
        return _BACKENDS[Dialect(str(dialect).lower())]()
    except ValueError:
        raise ValueError(f"unknown dialect {dialect!r}; write one of {[d.value for d in Dialect]}") from None


def resolve_dialect(engine: sa.Engine, override: str | Dialect | SqlDialect | None = None) -> SqlDialect:
    """The backend for ``engine``: the explicit ``override`` if given, else from its URL."""
    if isinstance(override, SqlDialect):
        return override
    if override is not None:
        return backend_for(override)
    return _BACKENDS[dialect_from_url(engine.url)]()
