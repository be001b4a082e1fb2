"""``run_after_commit``: a callback registered inside the caller's transaction runs when that
transaction commits, never when it rolls back, and at once outside a transaction — on every
dialect, since the hook is SQLAlchemy's engine-level ``commit`` event."""

from __future__ import annotations

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import _after_commit
from ekbatan.distributed_jobs.scheduler._after_commit import run_after_commit


def test_runs_at_the_commit_not_before(engine, dialect):
    calls: list[str] = []
    with engine.connect() as conn:
        conn.begin()
        run_after_commit(conn, lambda: calls.append("first"))
        run_after_commit(conn, lambda: calls.append("second"))
        assert calls == []
        conn.commit()
        assert calls == ["first", "second"]  # each once, in the order registered


def test_is_forgotten_at_a_rollback(engine, dialect):
    calls: list[str] = []
    with engine.connect() as conn:
        conn.begin()
        run_after_commit(conn, lambda: calls.append("rolled back"))
        conn.rollback()
        conn.begin()  # the next transaction on the same connection does not inherit it
        run_after_commit(conn, lambda: calls.append("committed"))
        conn.commit()
    assert calls == ["committed"]


def test_runs_at_once_without_a_transaction(engine, dialect):
    calls: list[str] = []
    with engine.connect() as conn:
        assert not conn.in_transaction()
        run_after_commit(conn, lambda: calls.append("now"))
        assert calls == ["now"]


def test_with_engine_begin_it_runs_when_the_block_commits(engine, dialect):
    calls: list[str] = []
    with engine.begin() as conn:
        run_after_commit(conn, lambda: calls.append("block"))
        assert calls == []
    assert calls == ["block"]


def test_the_hooks_are_installed_once_per_engine(engine, dialect):
    calls: list[int] = []
    for i in range(3):
        with engine.begin() as conn:
            run_after_commit(conn, lambda i=i: calls.append(i))
    assert calls == [0, 1, 2]  # a second listener per engine would call each twice
    assert sa.event.contains(engine, "commit", _after_commit._on_commit)


def test_connections_keep_their_own_callbacks(engine, dialect):
    calls: list[str] = []
    with engine.connect() as first, engine.connect() as second:
        first.begin()
        second.begin()
        run_after_commit(first, lambda: calls.append("first"))
        run_after_commit(second, lambda: calls.append("second"))
        second.rollback()
        assert calls == []
        first.commit()
    assert calls == ["first"]
