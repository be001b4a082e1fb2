"""The default polling strategy: sized lock-and-fetch where the server has ``SKIP LOCKED``,
fetch elsewhere (SQLite, MySQL before 8.0.1, MariaDB before 10.6), decided from the server's
reported version."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks
from ekbatan.distributed_jobs.scheduler._polling.poller import (
    AutoStrategy,
    FetchStrategy,
    LockAndFetchStrategy,
)
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import MAX_CLAIMED_PER_THREAD, ClaimSizing
from ekbatan.distributed_jobs.scheduler.dialects import MariaDbDialect, SqlDialect, resolve_dialect
from ekbatan.distributed_jobs.scheduler.dialects.mysql import server_has_skip_locked
from testsupport import wait_until


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("10.11.6-MariaDB-0+deb12u1", True),
        ("10.6.0-MariaDB", True),
        ("11.4.2-MariaDB-ubu2404", True),
        ("10.5.23-MariaDB-log", False),
        ("10.3.39-MariaDB-0+deb10u1", False),
        ("5.5.5-10.4.32-MariaDB", False),  # the replication prefix older clients were shown
        ("5.5.5-10.6.12-MariaDB", True),
        ("8.0.35", True),
        ("8.4.0-commercial", True),
        ("8.0.1-dmr-log", True),
        ("8.0.0-dmr", False),
        ("5.7.44-log", False),
        ("not a version", False),
    ],
)
def test_skip_locked_is_read_from_the_server_version(version, expected):
    assert server_has_skip_locked(version) is expected


def test_the_dialects_decide_without_asking_where_the_version_cannot_matter():
    postgres, sqlite = (resolve_dialect(None, name) for name in ("postgresql", "sqlite"))  # type: ignore[arg-type]
    assert postgres.server_version_query() is None and postgres.supports_skip_locked("")
    assert sqlite.server_version_query() is None and not sqlite.supports_skip_locked("")


def test_claims_grow_for_short_executions_and_stay_one_per_thread_for_long_ones():
    sizing = ClaimSizing(threads=10)
    assert sizing.upper() == 10  # nothing timed yet: one per thread
    for _ in range(30):
        sizing.record(0.0005)
    assert sizing.upper() == 10 * MAX_CLAIMED_PER_THREAD
    for _ in range(100):
        sizing.record(0.25)
    assert sizing.upper() == 10 * 5  # one running + four queued (a second's work) per thread
    for _ in range(30):
        sizing.record(3.0)
    assert sizing.upper() == 10


def _run_with_default_strategy(
    engine, dialect: SqlDialect | None = None, priority: bool = False
) -> AutoStrategy:
    ran: list[str] = []
    lock = threading.Lock()

    def run(instance, ctx):
        with lock:
            ran.append(instance.id)

    task = Tasks.one_time("t").execute(run)
    builder = Scheduler.create(engine, task).polling_interval(timedelta(milliseconds=50))
    if dialect is not None:
        builder.dialect(dialect)
    scheduler = builder.enable_priority(priority).build()
    scheduler.schedule_batch([task.instance(str(i)) for i in range(200)])
    with scheduler:
        wait_until(lambda: len(ran) == 200, timeout=60, message="200 executions ran")
        strategy = scheduler._poller.strategy
    assert sorted(ran, key=int) == [str(i) for i in range(200)]
    assert isinstance(strategy, AutoStrategy)
    return strategy


def test_the_default_strategy_on_each_server(engine, dialect):
    chosen = _run_with_default_strategy(engine).chosen
    if dialect == "sqlite":
        assert isinstance(chosen, FetchStrategy)
    else:  # PostgreSQL 15 and MariaDB 10.11 (also through a mysql+pymysql URL)
        assert isinstance(chosen, LockAndFetchStrategy) and chosen.sizing is not None
        assert chosen.sizing.mean_seconds is not None  # executions were timed


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_with_priorities_the_default_claims_no_more_than_the_threads(engine):
    chosen = _run_with_default_strategy(engine, priority=True).chosen
    assert isinstance(chosen, LockAndFetchStrategy)
    assert chosen.sizing is None and chosen.upper == 10  # lock-and-fetch (0.5, 1.0) x 10 threads


class _MariaDb105(MariaDbDialect):
    """The server's answer to a version query, as a MariaDB 10.5 server gives it."""

    def server_version_query(self) -> str | None:
        return "SELECT '10.5.23-MariaDB-log'"


@pytest.mark.dialects("mariadb")
def test_a_server_without_skip_locked_falls_back_to_fetch(engine):
    strategy = _run_with_default_strategy(engine, _MariaDb105())
    assert isinstance(strategy.chosen, FetchStrategy)
    assert "10.5.23" in strategy.repository.server_description()


def test_sized_claims_refill_while_half_of_them_still_wait():
    from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims

    sizing = ClaimSizing(threads=10)
    strategy = LockAndFetchStrategy(None, None, None, None, None, 5, 10, lambda: None, QueuedClaims(), sizing)  # type: ignore[arg-type]
    assert strategy._refill_at() == 5  # nothing timed: the lower limit, as explicit lock-and-fetch
    for _ in range(30):
        sizing.record(0.0005)
    assert strategy._refill_at() == 50  # half of the 100 it may hold
    explicit = LockAndFetchStrategy(None, None, None, None, None, 5, 100, lambda: None, QueuedClaims())  # type: ignore[arg-type]
    assert explicit._refill_at() == 5


def test_claim_sizing_learns_from_runs_only_not_from_claims_skipped_unrun():
    from ekbatan.distributed_jobs.scheduler._observability import Listeners
    from ekbatan.distributed_jobs.scheduler._polling.claimed_rows import QueuedClaims

    class SlowRunner:
        def __init__(self) -> None:
            self.ran: list[str] = []

        def execute(self, execution: str) -> None:
            time.sleep(0.05)  # the execution's own work
            self.ran.append(execution)

    runner, timings, claims = SlowRunner(), [], QueuedClaims()
    first = claims.job(claims.add("runs"), runner, Listeners(), timings.append)
    lost = claims.add("lost")
    lost_job = claims.job(lost, runner, Listeners(), timings.append)
    given_back_job = claims.job(claims.add("given back"), runner, Listeners(), timings.append)
    first()
    claims.mark_lost(lost)  # its row was taken over while it waited
    lost_job()
    assert claims.release_all() == ["given back"]  # shutdown
    given_back_job()
    assert runner.ran == ["runs"]
    assert len(timings) == 1 and timings[0] >= 0.05
