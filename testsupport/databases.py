"""Create and drop an isolated database per test on the real servers of this machine.

PostgreSQL 127.0.0.1:5432 (user postgres, trust), MariaDB 127.0.0.1:3306 (root, no password);
the ``mysql`` dialect talks to the same MariaDB server through a ``mysql+pymysql`` URL.
SQLite gets a file in a temporary directory.

``scope="schema"`` gives PostgreSQL a fresh schema inside the ``test`` database (cheap; the
URL pins ``search_path`` to it so subprocesses inherit the isolation through the URL alone);
``scope="database"`` gives a whole fresh database (needed when a test creates schemas itself,
such as ``eventlog``). On MariaDB/MySQL both scopes are a fresh database.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

ALL_DIALECTS = ("postgres", "mariadb", "mysql", "sqlite")

PG_HOST = os.environ.get("EKBATAN_TEST_PG", "postgres@127.0.0.1:5432")
MARIADB_HOST = os.environ.get("EKBATAN_TEST_MARIADB", "root@127.0.0.1:3306")


def server_url(dialect: str, database: str | None = None) -> str:
    """URL of the server for ``dialect``, optionally naming a database on it."""
    if dialect == "postgres":
        return f"postgresql+psycopg://{PG_HOST}/{database or 'test'}"
    if dialect == "mariadb":
        return f"mariadb+pymysql://{MARIADB_HOST}/{database or 'test'}"
    if dialect == "mysql":
        return f"mysql+pymysql://{MARIADB_HOST}/{database or 'test'}"
    raise ValueError(f"no server for dialect {dialect!r}; expected one of postgres, mariadb, mysql")


@dataclass
class IsolatedDatabase:
    dialect: str
    url: str
    name: str
    _drop: list = field(default_factory=list, repr=False)

    def engine(self, **kwargs: object) -> sa.Engine:
        eng = sa.create_engine(self.url, **kwargs)
        self._drop.append(eng.dispose)
        return eng

    def drop(self) -> None:
        for fn in reversed(self._drop):
            fn()
        self._drop.clear()


def _admin_engine(dialect: str, database: str | None = None) -> sa.Engine:
    return sa.create_engine(
        server_url(dialect, database), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
    )


def create_isolated_database(
    dialect: str, scope: Literal["schema", "database"] = "schema", prefix: str = "t"
) -> IsolatedDatabase:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    if dialect == "sqlite":
        directory = Path(tempfile.mkdtemp(prefix="ekbatan-test-"))
        db = IsolatedDatabase(dialect, f"sqlite:///{directory / 'test.sqlite'}", name)
        db._drop.append(lambda: shutil.rmtree(directory, ignore_errors=True))
        return db

    if dialect == "postgres" and scope == "schema":
        admin = _admin_engine(dialect)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        url = server_url(dialect) + f"?options=-csearch_path%3D{name}"
        db = IsolatedDatabase(dialect, url, name)

        def drop_schema() -> None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            admin.dispose()

        db._drop.append(drop_schema)
        return db

    admin = _admin_engine(dialect, "postgres" if dialect == "postgres" else None)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    db = IsolatedDatabase(dialect, server_url(dialect, name), name)

    def drop_database() -> None:
        with admin.connect() as conn:
            if dialect == "postgres":
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            else:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()

    db._drop.append(drop_database)
    return db
