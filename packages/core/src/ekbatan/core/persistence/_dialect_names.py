"""The names of the four SQL dialects Ekbatan speaks, and how a URL names one without opening a connection."""

from __future__ import annotations

from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError

from ekbatan.core.persistence._credentials import mask_url_password, masked_url


class DialectName(StrEnum):
    """The name of a SQL dialect Ekbatan speaks: SQLAlchemy's ``engine.dialect.name`` for it.

    The values are the strings used across the whole project. The scheduler engine, which
    depends on nothing in core, names the same four with its own
    ``ekbatan.distributed_jobs.scheduler.Dialect``; compare the two by value, not identity.
    """

    POSTGRESQL = "postgresql"
    MARIADB = "mariadb"
    MYSQL = "mysql"
    SQLITE = "sqlite"

    @property
    def is_mysql_family(self) -> bool:
        """MySQL and MariaDB share DDL habits: auto-committing DDL and ``eventlog`` as a database."""
        return self in (DialectName.MYSQL, DialectName.MARIADB)

    @property
    def has_transactional_ddl(self) -> bool:
        return self in (DialectName.POSTGRESQL, DialectName.SQLITE)


SUPPORTED_DIALECTS = ", ".join(d.value for d in DialectName)

_BACKENDS = {
    "postgresql": DialectName.POSTGRESQL,
    "mariadb": DialectName.MARIADB,
    "mysql": DialectName.MYSQL,
    "sqlite": DialectName.SQLITE,
}

_EXAMPLES = {
    DialectName.POSTGRESQL: "postgresql+psycopg://user@host:5432/app",
    DialectName.MARIADB: "mariadb+pymysql://user@host:3306/app",
    DialectName.MYSQL: "mysql+pymysql://user@host:3306/app",
    DialectName.SQLITE: "sqlite:///path/to/app.sqlite",
}


def example_url(dialect: DialectName) -> str:
    return _EXAMPLES[dialect]


def parse_sqlalchemy_url(url: str | sa.URL) -> sa.URL:
    """``make_url`` whose error never echoes a password that was part of the text."""
    if isinstance(url, sa.URL):
        return url
    try:
        return sa.make_url(url)
    except ArgumentError:
        raise ValueError(
            f"{mask_url_password(url)!r} is not a SQLAlchemy URL; write e.g. "
            f"{_EXAMPLES[DialectName.POSTGRESQL]!r} (or use jdbc-url for a JDBC URL)"
        ) from None


def dialect_name_from_url(url: str | sa.URL) -> DialectName:
    """The dialect named by a SQLAlchemy URL's drivername (``mariadb+pymysql`` → ``mariadb``).

    Only the scheme decides: host and database names never influence the answer, and no
    connection is opened. A MariaDB server reached through ``mysql+pymysql`` is ``mysql``.
    """
    parsed = parse_sqlalchemy_url(url)
    backend = parsed.get_backend_name()
    if backend in _BACKENDS:
        return _BACKENDS[backend]
    if backend == "postgres":
        raise ValueError(
            f"{parsed.drivername!r} is not a SQLAlchemy dialect name; write 'postgresql+psycopg://…'"
        )
    raise ValueError(
        f"cannot use the database dialect {backend!r} of URL {masked_url(parsed)!r}; "
        f"Ekbatan supports {SUPPORTED_DIALECTS} (e.g. {_EXAMPLES[DialectName.POSTGRESQL]!r})"
    )
