"""Per-execution writes straight through psycopg (driver_statements.py): PostgreSQL only, as
the path itself is; other dialects always take the SQLAlchemy path (covered everywhere else)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from scheduler_repositories import notifying_repository
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from ekbatan.distributed_jobs.scheduler import ExecutionError, Tasks
from ekbatan.distributed_jobs.scheduler._table.driver_statements import (
    DriverStatement,
    driver_path_available,
    to_pyformat,
)
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect
from testsupport import kill_sessions, session_id

TASK = Tasks.one_time("direct").execute(lambda instance, ctx: None)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_placeholders_become_psycopg_ones_and_casts_and_percent_signs_survive():
    assert (
        to_pyformat("DELETE FROM t WHERE a = :a AND b = :b_2")
        == "DELETE FROM t WHERE a = %(a)s AND b = %(b_2)s"
    )
    assert to_pyformat("SELECT :x::int, '50%'") == "SELECT %(x)s::int, '50%%'"


def test_only_postgresql_with_psycopg_takes_the_driver_path():
    assert driver_path_available(sa.create_engine("postgresql+psycopg://u@h/db"))
    assert not driver_path_available(sa.create_engine("mysql+pymysql://u@h/db"))
    assert not driver_path_available(sa.create_engine("sqlite://"))


def test_other_dialects_keep_every_statement_on_sqlalchemy(engine, dialect):
    repo = repository(engine)
    assert bool(repo._direct) is (dialect == "postgres")
    repo.create_batch([NewExecution(TASK.name, "only", NOW, None, None)])
    (candidate,) = repo.get_due(datetime.now(UTC), 10)
    picked = repo.pick(candidate, datetime.now(UTC))  # whichever path: one version-guarded claim
    assert picked is not None
    assert repo.pick(candidate, datetime.now(UTC)) is None
    repo.remove(picked)  # … and one version-guarded delete
    assert remaining(engine) == 0


def repository(engine: sa.Engine) -> TaskRepository:
    return TaskRepository(engine, resolve_dialect(engine), TaskResolver([TASK]), picked_by="direct")


def claimed(repo: TaskRepository, n: int):
    repo.create_batch([NewExecution(TASK.name, str(i), NOW, None, None) for i in range(n)])
    return repo.lock_and_fetch(datetime.now(UTC), n)


def driver_calls(monkeypatch) -> list[str]:
    """The first SQL word of every statement that goes through the driver path from now on."""
    calls: list[str] = []
    through_driver = DriverStatement.rowcount

    def counted(self, params):
        calls.append(self.sql.split()[0])
        return through_driver(self, params)

    monkeypatch.setattr(DriverStatement, "rowcount", counted)
    return calls


def remaining(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM scheduled_tasks")).scalar_one()


@pytest.mark.dialects("postgres")
def test_claims_and_deletes_go_through_the_driver_and_keep_their_version_guard(engine, dialect, monkeypatch):
    repo = repository(engine)
    assert set(repo._direct) == {repo._sql_pick, repo._sql_remove}
    assert all(driver.usable for driver in repo._direct.values())
    calls = driver_calls(monkeypatch)
    first, second = claimed(repo, 2)
    repo.remove(first)
    with pytest.raises(ExecutionError, match="another writer changed it first"):
        repo.remove(second.with_changes(version=second.version + 5))
    assert remaining(engine) == 1
    assert repo.remove_many([second]) == {(second.task_name, second.instance_id)}
    assert remaining(engine) == 0

    repo.create_batch([NewExecution(TASK.name, "p", NOW, None, None)])
    (candidate,) = repo.get_due(datetime.now(UTC), 10)
    picked = repo.pick(candidate, datetime.now(UTC))
    assert picked is not None and picked.version == candidate.version + 1
    assert repo.pick(candidate, datetime.now(UTC)) is None  # stale version: nothing claimed
    stored = repo.get_execution(TASK.name, "p")
    assert (stored.picked, stored.picked_by, stored.version) == (True, "direct", picked.version)
    assert calls == ["DELETE", "DELETE", "DELETE", "UPDATE", "UPDATE"]


@pytest.mark.dialects("postgres")
@pytest.mark.parametrize(
    "watch",
    [
        lambda e: event.listen(e, "before_execute", lambda *a: None),
        lambda e: event.listen(e, "after_cursor_execute", lambda *a: None),
        lambda e: event.listen(e, "handle_error", lambda *a: None),
        lambda e: event.listen(e, "do_execute", lambda *a: None),
        lambda e: setattr(e, "echo", True),
    ],
    ids=["before_execute", "after_cursor_execute", "handle_error", "do_execute", "echo"],
)
def test_anything_watching_statements_turns_the_driver_path_off(database, dialect, watch):
    engine = database.engine()
    try:
        statement = DriverStatement(engine, "SELECT 1")
        assert statement.usable
        watch(engine)
        assert not statement.usable
    finally:
        engine.dispose()


@pytest.mark.dialects("postgres")
def test_a_cursor_listener_sees_every_statement_because_the_driver_path_steps_aside(engine, dialect):
    repo = repository(engine)
    executions = claimed(repo, 1)
    seen: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: seen.append(statement)
    )
    assert not repo._direct[repo._sql_remove].usable
    repo.remove(executions[0])
    assert any(s.startswith("DELETE FROM scheduled_tasks") for s in seen)
    assert remaining(engine) == 0


@pytest.mark.dialects("postgres")
def test_driver_errors_surface_as_sqlalchemy_errors_and_the_connection_stays_usable(engine, dialect):
    broken = DriverStatement(engine, "DELETE FROM no_such_table WHERE id = :id")
    with pytest.raises(DBAPIError) as raised:
        broken.rowcount({"id": 1})
    assert getattr(raised.value.orig, "sqlstate", None) == "42P01"  # undefined table
    assert not raised.value.connection_invalidated
    assert DriverStatement(engine, "SELECT 1 WHERE :x = 1").rowcount({"x": 1}) == 1
    # back in the pool as it came: not in autocommit, no transaction left open
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver.autocommit is False
        assert driver.info.transaction_status.name == "IDLE"


@pytest.mark.dialects("postgres")
def test_an_autocommit_engine_keeps_autocommit_after_the_driver_path(database, dialect):
    engine = database.engine(isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE TABLE kept (id int)"))
        assert DriverStatement(engine, "SELECT 1 WHERE :x = 1").rowcount({"x": 1}) == 1
        with engine.connect() as conn:  # no commit: the engine autocommits
            conn.execute(sa.text("INSERT INTO kept VALUES (1)"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM kept")).scalar_one() == 1
    finally:
        engine.dispose()


@pytest.mark.dialects("postgres")
def test_an_unreachable_server_at_checkout_is_a_sqlalchemy_error(dialect):
    engine = sa.create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2")
    try:
        with pytest.raises(DBAPIError):
            DriverStatement(engine, "SELECT 1 WHERE :x = 1").rowcount({"x": 1})
    finally:
        engine.dispose()


@pytest.mark.dialects("postgres")
def test_killed_connections_invalidate_the_whole_pool_once_as_sqlalchemy_does(database, dialect):
    engine = database.engine(pool_size=3, max_overflow=0)
    try:
        held = [engine.connect() for _ in range(3)]
        sessions = [session_id(c) for c in held]
        for c in held:
            c.close()
        kill_sessions(database.url, *sessions)
        statement = DriverStatement(engine, "SELECT 1 WHERE :x = 1")
        with pytest.raises(DBAPIError) as raised:
            statement.rowcount({"x": 1})
        assert raised.value.connection_invalidated
        assert getattr(raised.value.orig, "sqlstate", None) == "57P01"  # the real cause, not a follow-up
        # the other two dead connections were recycled with it: the next calls all succeed
        assert [statement.rowcount({"x": 1}) for _ in range(3)] == [1, 1, 1]
    finally:
        engine.dispose()


@pytest.mark.dialects("postgres")
def test_scheduling_one_execution_with_its_notification_goes_through_the_driver(engine, dialect, monkeypatch):
    repo = notifying_repository(engine, [TASK], "direct")
    calls = driver_calls(monkeypatch)
    new = NewExecution(TASK.name, "once", NOW, None, None)
    assert repo.create_if_not_exists(new) is True
    assert repo.create_if_not_exists(new) is False, "the second insert finds the row: no notification"
    with engine.connect() as conn, conn.begin():  # the caller's transaction stays on SQLAlchemy
        assert repo.create_if_not_exists(NewExecution(TASK.name, "in-tx", NOW, None, None), conn) is True
    assert calls == ["WITH", "WITH"]
    assert remaining(engine) == 2
