"""The four SQL dialects Ekbatan speaks, and how a URL names one without opening a connection."""

from __future__ import annotations

from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError

from ekbatan.core.persistence.credentials import mask_url_password, masked_url


class Dialect(StrEnum):
    """A database family. The values are the strings used across the whole project."""

    POSTGRESQL = "postgresql"
    MARIADB = "mariadb"
    MYSQL = "mysql"
    SQLITE = "sqlite"

    @property
    def is_mysql_family(self) -> bool:
        """MySQL and MariaDB share DDL habits: auto-committing DDL and ``eventlog`` as a database."""
        return self in (Dialect.MYSQL, Dialect.MARIADB)

    @property
    def has_transactional_ddl(self) -> bool:
        return self in (Dialect.POSTGRESQL, Dialect.SQLITE)


SUPPORTED_DIALECTS = ", ".join(d.value for d in Dialect)

_BACKENDS = {
    "postgresql": Dialect.POSTGRESQL,
    "mariadb": Dialect.MARIADB,
    "mysql": Dialect.MYSQL,
    "sqlite": Dialect.SQLITE,
}

_EXAMPLES = {
    Dialect.POSTGRESQL: "postgresql+psycopg://user@host:5432/app",
    Dialect.MARIADB: "mariadb+pymysql://user@host:3306/app",
    Dialect.MYSQL: "mysql+pymysql://user@host:3306/app",
    Dialect.SQLITE: "sqlite:///path/to/app.sqlite",
}


def example_url(dialect: Dialect) -> str:
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
            f"{_EXAMPLES[Dialect.POSTGRESQL]!r} (or use jdbc-url for a JDBC URL)"
        ) from None


def dialect_from_url(url: str | sa.URL) -> Dialect:
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
        f"Ekbatan supports {SUPPORTED_DIALECTS} (e.g. {_EXAMPLES[Dialect.POSTGRESQL]!r})"
    )
