import time

import pytest
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider
from ekbatan.core.persistence import install_idle_ping
from testsupport import kill_sessions, session_id

pytestmark = pytest.mark.dialects("postgres", "mariadb")


def _pool_with_a_killed_connection(url: str, idle_seconds: float) -> tuple[sa.Engine, int]:
    """A one-connection pool whose connection the server has since closed, and its session id."""
    engine = sa.create_engine(url, pool_size=1, max_overflow=0)
    install_idle_ping(engine, idle_seconds=idle_seconds)
    with engine.connect() as connection:
        first = session_id(connection)
    kill_sessions(url, first)
    return engine, first


def test_a_connection_idle_past_the_window_is_pinged_and_replaced_when_dead(database):
    engine, first = _pool_with_a_killed_connection(database.url, idle_seconds=0)
    try:
        with engine.connect() as connection:  # the ping finds it dead; the pool opens another
            assert session_id(connection) != first
    finally:
        engine.dispose()


def test_a_connection_used_within_the_window_is_not_pinged(database):
    engine, first = _pool_with_a_killed_connection(database.url, idle_seconds=3600)
    try:
        # No ping: the dead connection is handed out and its statement fails as a disconnect...
        with pytest.raises(sa.exc.DBAPIError) as raised, engine.connect() as connection:
            session_id(connection)
        assert raised.value.connection_invalidated
        # ...after which the pool has been invalidated and the next checkout connects afresh.
        with engine.connect() as connection:
            assert session_id(connection) != first
    finally:
        engine.dispose()


def test_connection_providers_ping_connections_that_sat_idle(database):
    provider = ConnectionProvider.from_url(database.url, maximum_pool_size=1)
    try:
        assert provider.engine.pool._pre_ping is False  # no round trip on every checkout
        with provider.connect() as connection:
            first = session_id(connection)
        kill_sessions(database.url, first)
        time.sleep(0.6)  # what is tested is the passing of the 0.5 s window itself
        with provider.connect() as connection:
            assert session_id(connection) != first
    finally:
        provider.close()


def test_a_negative_window_is_refused():
    with pytest.raises(ValueError, match="idle_seconds must be 0 or more, not -1"):
        install_idle_ping(sa.create_engine("sqlite://"), idle_seconds=-1)


def test_an_explicit_pool_pre_ping_replaces_the_idle_ping(database):
    template = ConnectionProvider.from_url(database.url, maximum_pool_size=1)  # never connects
    config = template.config
    template.close()
    for choice in (True, False):
        provider = ConnectionProvider(config, pool_pre_ping=choice)
        try:
            with provider.connect() as connection:
                first = session_id(connection)
            kill_sessions(database.url, first)
            if choice:  # SQLAlchemy pings on every checkout, idle or not
                with provider.connect() as connection:
                    assert session_id(connection) != first
            else:  # no check at all, even after the idle window: the dead connection is handed out
                time.sleep(0.6)  # past the 0.5 s window, which an idle ping would have used
                with pytest.raises(sa.exc.DBAPIError), provider.connect() as connection:
                    session_id(connection)
        finally:
            provider.close()


def test_the_scheduler_s_raw_checkouts_are_pinged_too_and_new_connections_never(database):
    engine = sa.create_engine(database.url, pool_size=1, max_overflow=0)
    install_idle_ping(engine, idle_seconds=0)
    ping, pings = engine.dialect.do_ping, []

    def counted(dbapi_connection):
        pings.append(dbapi_connection)
        return ping(dbapi_connection)

    engine.dialect.do_ping = counted  # counts what the listener sends; the ping itself is real
    try:
        raw = engine.raw_connection()  # a new connection: the connect itself proved it
        first = session_id(raw)
        raw.close()
        assert pings == []
        kill_sessions(database.url, first)
        raw = engine.raw_connection()  # pinged, found dead, replaced by a fresh connection
        try:
            assert len(pings) == 1 and session_id(raw) != first
        finally:
            raw.close()
    finally:
        engine.dispose()
