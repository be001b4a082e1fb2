"""Per-execution writes straight through psycopg (driver_statements.py): PostgreSQL only, as
the path itself is; other dialects always take the SQLAlchemy path (covered everywhere else)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from ekbatan.distributed_jobs.scheduler import ExecutionError, Tasks
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect
from ekbatan.distributed_jobs.scheduler.driver_statements import (
    DriverStatement,
    driver_path_available,
    to_pyformat,
)
from ekbatan.distributed_jobs.scheduler.repository import NewExecution, TaskRepository
from ekbatan.distributed_jobs.scheduler.unresolved import TaskResolver

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


def repository(engine: sa.Engine) -> TaskRepository:
    return TaskRepository(engine, resolve_dialect(engine), TaskResolver([TASK]), picked_by="direct")


def claimed(repo: TaskRepository, n: int):
    repo.create_batch([NewExecution(TASK.name, str(i), NOW, None, None) for i in range(n)])
    return repo.lock_and_fetch(datetime.now(UTC), n)


def remaining(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM scheduled_tasks")).scalar_one()


@pytest.mark.dialects("postgres")
def test_claims_and_deletes_go_through_the_driver_and_keep_their_version_guard(engine, dialect):
    repo = repository(engine)
    assert repo._driver_pick is not None and repo._driver_pick.usable
    first, second = claimed(repo, 2)
    repo.remove(first)
    with pytest.raises(ExecutionError, match="another writer changed it first"):
        repo.remove(second.with_changes(version=second.version + 5))
    assert remaining(engine) == 1
    assert repo._remove_many([second]) == {(second.task_name, second.instance_id)}
    assert remaining(engine) == 0

    repo.create_batch([NewExecution(TASK.name, "p", NOW, None, None)])
    (candidate,) = repo.get_due(datetime.now(UTC), 10)
    picked = repo.pick(candidate, datetime.now(UTC))
    assert picked is not None and picked.version == candidate.version + 1
    assert repo.pick(candidate, datetime.now(UTC)) is None  # stale version: nothing claimed
    stored = repo.get_execution(TASK.name, "p")
    assert (stored.picked, stored.picked_by, stored.version) == (True, "direct", picked.version)


@pytest.mark.dialects("postgres")
def test_a_cursor_listener_sees_every_statement_because_the_driver_path_steps_aside(engine, dialect):
    repo = repository(engine)
    executions = claimed(repo, 1)
    seen: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: seen.append(statement)
    )
    assert not repo._driver_remove.usable
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


@pytest.mark.dialects("postgres")
def test_a_connection_killed_under_the_driver_path_is_invalidated_not_reused(database, dialect):
    engine = database.engine(pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        killer = database.engine(poolclass=sa.NullPool)
        with killer.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        killer.dispose()
        statement = DriverStatement(engine, "SELECT 1 WHERE :x = 1")
        with pytest.raises(DBAPIError) as raised:
            statement.rowcount({"x": 1})
        assert raised.value.connection_invalidated
        assert statement.rowcount({"x": 1}) == 1  # a fresh connection replaced the dead one
    finally:
        engine.dispose()
