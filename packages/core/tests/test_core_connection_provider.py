import threading

import pytest
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider, DataSourceConfig, DialectName, TransactionManager
from ekbatan.core.persistence import engine_options

UNREACHABLE = "postgresql+psycopg://u:hunter2@nonexistent.invalid:5432/db"


def test_building_against_an_unreachable_host_neither_fails_nor_blocks():
    # Building connects to nothing: a connection attempt would raise here, since a ``.invalid``
    # host never resolves, so "no error" is "no attempt" (and so nothing to block on).
    for url in (
        UNREACHABLE,
        "mariadb+pymysql://u:hunter2@nonexistent.invalid/db",
        "mysql+pymysql://u:hunter2@nonexistent.invalid/db",
    ):
        provider = ConnectionProvider.from_url(url, maximum_pool_size=3)
        assert provider.engine.pool.checkedout() == 0
        assert provider.engine.pool.checkedin() == 0  # no connection was made and pooled
        provider.close()


def test_the_password_never_appears_in_repr_str_url_or_connection_errors():
    provider = ConnectionProvider.from_url(UNREACHABLE, name="orders", connection_timeout=1000)
    assert provider.dialect is DialectName.POSTGRESQL
    for text in (repr(provider), str(provider), provider.url, repr(provider.config)):
        assert "hunter2" not in text
    assert "***" in provider.url
    with pytest.raises(sa.exc.OperationalError) as raised, provider.connect():
        pass
    assert "hunter2" not in str(raised.value)
    provider.close()
    provider.close()  # idempotent
    assert provider.closed


def test_pool_settings_map_onto_sqlalchemy():
    config = DataSourceConfig(
        url="postgresql+psycopg://u@h/db", maximum_pool_size=7, connection_timeout=2500, max_lifetime=60_000
    )
    options = engine_options(config)
    assert options == {
        "pool_size": 7,
        "max_overflow": 0,
        "pool_timeout": 2.5,
        "pool_recycle": 60.0,
    }
    sqlite = engine_options(DataSourceConfig(url="sqlite:///x.sqlite", maximum_pool_size=2))
    assert sqlite == {"pool_size": 2, "max_overflow": 0, "pool_timeout": 30.0}
    assert engine_options(DataSourceConfig(url="sqlite://")) == {}


def test_maximum_pool_size_is_a_hard_ceiling(tmp_path):
    provider = ConnectionProvider.from_url(
        f"sqlite:///{tmp_path / 'x.sqlite'}", maximum_pool_size=1, connection_timeout=200
    )
    with provider.connect(), pytest.raises(sa.exc.TimeoutError):
        provider.connect()
    provider.close()


@pytest.mark.dialects("mariadb", "mysql")
def test_mysql_family_sessions_run_in_utc(database):
    provider = ConnectionProvider.from_url(database.url, maximum_pool_size=2)
    try:
        with provider.connect() as connection:
            assert connection.exec_driver_sql("SELECT @@session.time_zone").scalar() == "+00:00"
    finally:
        provider.close()


@pytest.mark.dialects("sqlite")
def test_sqlite_connections_wait_for_locks_use_wal_and_begin_immediate(database):
    provider = ConnectionProvider.from_url(database.url, maximum_pool_size=2)
    try:
        with provider.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        # DDL is transactional: a rolled-back CREATE TABLE leaves nothing behind.
        with provider.connect() as connection:
            connection.exec_driver_sql("CREATE TABLE t (x INT)")
            connection.rollback()
        with provider.connect() as connection:
            assert (
                connection.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE name='t'").scalar() == 0
            )
    finally:
        provider.close()


def test_transactions_commit_roll_back_and_bind_the_current_connection(dialect, database):
    manager = TransactionManager(ConnectionProvider.from_url(database.url, maximum_pool_size=3))
    try:
        with manager.transaction() as connection:
            connection.exec_driver_sql("CREATE TABLE items (id INT PRIMARY KEY)")
        assert manager.current_connection() is None
        with manager.transaction() as connection:
            assert manager.current_connection() is connection
            connection.exec_driver_sql("INSERT INTO items VALUES (1)")
        with pytest.raises(RuntimeError), manager.transaction() as connection:
            connection.exec_driver_sql("INSERT INTO items VALUES (2)")
            raise RuntimeError("boom")
        assert manager.current_connection() is None
        with manager.read_only() as connection:
            assert [r[0] for r in connection.exec_driver_sql("SELECT id FROM items")] == [1]
        assert manager.secondary is manager.primary
    finally:
        manager.close()


@pytest.mark.dialects("postgres", "sqlite")
def test_the_bound_transaction_is_invisible_to_other_threads(dialect, database):
    manager = TransactionManager(ConnectionProvider.from_url(database.url, maximum_pool_size=3))
    seen = []
    try:
        with manager.transaction() as connection:
            thread = threading.Thread(target=lambda: seen.append(manager.current_connection()))
            thread.start()
            thread.join()
            assert manager.current_connection() is connection
        assert seen == [None]
    finally:
        manager.close()
