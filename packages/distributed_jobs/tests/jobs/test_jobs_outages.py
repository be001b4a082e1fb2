"""When the jobs database is not there: a wrong login or an unreachable host fails ``start()``
at once with one error naming the pool, leaving no thread behind; a degraded start waits for
the database; a database restarted under a running scheduler costs nothing but time.

The outage tests run on private servers of their own (``testsupport.private_servers``): the
shared ones serve every other test on the machine and must never go down.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.core.persistence import ConnectionProvider, DataSourceConfig
from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    JobRegistry,
    JobsDatabaseUnavailableError,
    Schedules,
)
from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks, create_table
from testsupport import wait_until
from testsupport.private_servers import PrivateServer, private_server

PASSWORD = "s3cret-Pw"
CONFIG_PATH = "ekbatan.sharding.groups[0].members[0].configs.jobs-config"


class CountingJob(DistributedJob):
    def __init__(self, name: str) -> None:
        self._name = name
        self.runs = 0

    def name(self) -> str:
        return self._name

    def schedule(self):
        return Schedules.fixed_delay(timedelta(milliseconds=200))

    def execute(self, context: JobContext) -> None:
        self.runs += 1


def jobs_pool(url: str) -> ConnectionProvider:
    return ConnectionProvider(
        DataSourceConfig(url=url, maximum_pool_size=4), name="jobs", config_path=CONFIG_PATH
    )


def registry_on(pool: ConnectionProvider, job: DistributedJob, **customize: object) -> JobRegistry:
    return (
        JobRegistry.builder()
        .connection_provider(pool)
        .with_job(job)
        .poll_interval(timedelta(milliseconds=100))
        .heartbeat_interval(timedelta(milliseconds=500))
        .shutdown_max_wait(timedelta(seconds=5))
        .register_shutdown_hook(False)
        .customize_scheduler(lambda b: b.missed_heartbeats_limit(4).scheduler_name("outage"))
        .build()
    )


def ekbatan_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


@pytest.fixture
def private() -> Iterator[Callable[..., PrivateServer]]:
    """``private(dialect, started=True)``: a private server, removed after the test."""
    stack: list = []

    def make(dialect: str, started: bool = True) -> PrivateServer:
        manager = private_server(dialect, started=started)
        server = manager.__enter__()
        stack.append(manager)
        return server

    yield make
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


# --------------------------------------------------------------------------- fail fast
BAD_POOLS = {
    # MariaDB refuses an unknown user at once
    "mariadb-unknown-user": (
        f"mysql+pymysql://nosuchuser:{PASSWORD}@127.0.0.1:3306/test",
        "Access denied for user 'nosuchuser'",
    ),
    # PostgreSQL here trusts every local user: an unknown database is its failed login
    "postgres-unknown-database": (
        f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432/no_such_database_x",
        'database "no_such_database_x" does not exist',
    ),
    "postgres-unreachable": (f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/test", "refused"),
    "mariadb-unreachable": (f"mariadb+pymysql://root:{PASSWORD}@127.0.0.1:1/test", "Can't connect"),
}


@pytest.mark.parametrize("case", sorted(BAD_POOLS))
def test_start_fails_fast_naming_the_pool_and_leaves_no_thread(case: str, caplog: pytest.LogCaptureFixture):
    url, cause = BAD_POOLS[case]
    pool = jobs_pool(url)
    before = ekbatan_threads()
    try:
        registry = registry_on(pool, CountingJob(f"never-{uuid.uuid4().hex[:8]}"))
        caplog.set_level(logging.DEBUG, logger="ekbatan")
        attempts: list[object] = []
        sa.event.listen(pool.engine, "do_connect", lambda *args: attempts.append(args))
        with pytest.raises(JobsDatabaseUnavailableError) as raised, registry:
            pytest.fail("the registry must not start")
        message = str(raised.value)
        # fast: one connection attempt, no retries before giving up
        assert len(attempts) == 1, f"{len(attempts)} connection attempts"
        assert CONFIG_PATH in message and "(jobs)" in message, message
        assert cause in message, message
        assert "***@127.0.0.1" in message and PASSWORD not in message, message
        assert PASSWORD not in caplog.text
        # one error, not a log full of tracebacks from threads that should never have started
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert ekbatan_threads() - before == set()
        assert not registry.scheduler.is_started
    finally:
        pool.close()


# --------------------------------------------------------------------------- degraded start
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_degraded_start_waits_for_the_database_and_then_works(kind: str, private, caplog):
    server = private(kind)
    admin = sa.create_engine(server.url, poolclass=sa.NullPool)
    create_table(admin)  # migrated earlier; the database is down when the application starts
    admin.dispose()
    server.stop()

    pool = jobs_pool(server.url)
    job = CountingJob("degraded")
    registry = registry_on(pool, job)
    caplog.set_level(logging.INFO, logger="ekbatan")
    try:
        with pytest.raises(JobsDatabaseUnavailableError):
            registry.start()  # the default: fail fast
        registry.start(require_database=False)
        assert registry.scheduler.is_started
        assert registry.waiting_for_database
        assert registry.scheduler.startup_tasks_pending == ["degraded"]
        assert registry.scheduler.startup_tasks_waiting_for_database == ["degraded"]
        # the scheduler keeps retrying meanwhile, quietly: several failed polls, no run
        poller = registry.scheduler._poller
        wait_until(lambda: poller.failures.failures_in_a_row >= 3, timeout=30, message="polls retried")
        assert job.runs == 0 and registry.waiting_for_database

        server.start()
        wait_until(lambda: job.runs >= 2, timeout=30, message="the job runs once the database is there")
        assert not registry.waiting_for_database
        assert registry.scheduler.startup_tasks_pending == []
        assert poller.failures.failures_in_a_row == 0  # the polls' streak ended
        # the 'recovered' line is written after the streak ends, outside its lock, by the
        # poller's thread: the log is read once the threads that write it are stopped
        registry.stop()
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) <= 12, "\n".join(r.getMessage() for r in lines)
        assert any("polling for due executions recovered" in r.getMessage() for r in lines)
    finally:
        registry.stop()
        pool.close()


# --------------------------------------------------------------------------- restart mid-run
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_database_restart_loses_nothing_and_logs_little(kind: str, private, caplog):
    server = private(kind)
    pool = jobs_pool(server.url)
    engine = pool.engine
    create_table(engine)
    done: set[str] = set()
    recurring_runs: list[float] = []
    lock = threading.Lock()

    def one_time(instance, ctx) -> None:
        time.sleep(0.02)
        with lock:
            done.add(instance.id)

    def recurring(instance, ctx) -> None:
        with lock:
            recurring_runs.append(time.monotonic())

    task = Tasks.one_time("one-time").execute(one_time)
    tick = Tasks.recurring("tick", Schedules.fixed_delay(timedelta(milliseconds=200))).execute(recurring)
    scheduler = (
        Scheduler.create(engine, task)
        .start_tasks(tick)
        .threads(4)
        .polling_interval(timedelta(milliseconds=100))
        .heartbeat_interval(timedelta(milliseconds=500))
        .missed_heartbeats_limit(4)
        .shutdown_max_wait(timedelta(seconds=5))
        .scheduler_name("restarted")
        .build()
    )
    ids = [f"t{i}" for i in range(300)]
    now = datetime.now(UTC)
    # spread over the run, so some are due while the database is down
    for n, ident in enumerate(ids):
        scheduler.schedule(task.instance(ident), now + timedelta(milliseconds=20 * n))
    caplog.set_level(logging.INFO, logger="ekbatan")
    try:
        scheduler.start()
        wait_until(lambda: len(done) >= 20, timeout=20, message="work starts")
        caplog.clear()
        server.stop()
        down_at = time.monotonic()
        time.sleep(12)
        server.start()
        up_at = time.monotonic()
        outage_lines = [r for r in caplog.records if r.levelno >= logging.WARNING]

        try:
            wait_until(
                lambda: done >= set(ids), timeout=25, interval=0.1, message="every one-time task completes"
            )
        except AssertionError:
            with engine.connect() as connection:
                left = connection.execute(sa.text("SELECT * FROM scheduled_tasks")).all()
            raise AssertionError(f"missing {sorted(set(ids) - done)}; rows {left}") from None
        wait_until(
            lambda: any(t > up_at for t in recurring_runs),
            timeout=10,
            message="the recurring task runs again",
        )
        # no row stays picked past the dead window (2 s): revived or completed
        dead_window = timedelta(seconds=2)

        def stale_picked() -> int:
            with engine.connect() as connection:
                return connection.execute(
                    sa.text("SELECT COUNT(*) FROM scheduled_tasks WHERE picked AND last_heartbeat < :old"),
                    {"old": datetime.now(UTC) - dead_window - timedelta(seconds=1)},
                ).scalar_one()

        wait_until(lambda: stale_picked() == 0, timeout=10, interval=0.2, message="no stale picked row")

        def one_time_rows() -> int:
            with engine.connect() as connection:
                return connection.execute(
                    sa.text("SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'one-time'")
                ).scalar_one()

        # an execution that ran while its result could not be recorded was revived and runs
        # again (at least once): wait for those second runs too before stopping
        wait_until(lambda: one_time_rows() == 0, timeout=20, interval=0.2, message="every revived one ran")
    finally:
        scheduler.stop()
    with engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT task_name, picked FROM scheduled_tasks")).all()
    pool.close()
    assert rows == [("tick", False)], rows
    # A bounded log: one line per failing activity and its recovery, and one traceback per
    # execution that was in the worker pool when the server died — how many is a matter of
    # timing, but never more than a fetch holds (3 × 4 threads) plus the 0.5 × 4 left when the
    # next one is fetched, plus the recurring tick. Never one per poll (12 s at 100 ms is 120).
    in_flight = 3 * 4 + 2 + 1
    seconds = up_at - down_at
    assert len(outage_lines) <= in_flight + 17, f"{len(outage_lines)} lines in {seconds:.0f}s:\n" + "\n".join(
        f"{r.name}: {r.getMessage()[:160]}" for r in outage_lines
    )
    tracebacks = [r for r in outage_lines if r.exc_info]
    assert len(tracebacks) <= in_flight, "\n".join(r.getMessage()[:160] for r in tracebacks)


# --------------------------------------------------------------------------- outage policy
UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


def test_the_failure_summary_interval_and_the_retry_backoff_cap_are_the_builders(caplog):
    engine = sa.create_engine(UNREACHABLE)
    task = Tasks.one_time("never").execute(lambda instance, ctx: None)
    scheduler = (
        Scheduler.create(engine, task)
        .polling_interval(timedelta(milliseconds=50))
        .failure_summary_interval(timedelta(milliseconds=500))
        .max_retry_backoff(timedelta(milliseconds=200))
        .listen_for_notifications(False)
        .scheduler_name("policy")
        .build()
    )
    caplog.set_level(logging.WARNING, logger="ekbatan")
    try:
        scheduler.start()
        poller = scheduler._poller
        # capped at 0.2 s, 12 polls take about 2 s; at the default cap (10 s) they take 40 s
        wait_until(lambda: poller.failures.failures_in_a_row >= 12, timeout=15, message="12 failed polls")
        # a summary every 0.5 s instead of every minute: the first within 10 s (at the default
        # interval, a minute, none would be due yet)
        wait_until(
            lambda: poller.failures.summaries >= 1, timeout=10, message="a summary of the failing polls"
        )
        # the lines are written outside the streak's lock by the poller's thread: read once it stopped
        scheduler.stop()
        messages = [r.getMessage() for r in caplog.records]
        [first] = [m for m in messages if m.startswith("polling for due executions failed")]
        assert "summarizing further failures every 0.5s" in first, first
        assert any(m.startswith("polling for due executions still failing") for m in messages), messages
    finally:
        scheduler.stop()
        engine.dispose()


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1)])
def test_the_outage_options_refuse_a_non_positive_duration(bad: timedelta):
    builder = Scheduler.create(sa.create_engine("sqlite://"))
    with pytest.raises(ValueError, match="failure summary interval must be positive"):
        builder.failure_summary_interval(bad)
    with pytest.raises(ValueError, match="max retry backoff must be positive"):
        builder.max_retry_backoff(bad)


# --------------------------------------------------------------------------- results lost with the database
@pytest.mark.slow
@pytest.mark.parametrize("batched", [True, False], ids=["group-commit", "one-by-one"])
def test_results_lost_with_the_database_are_logged_once_per_streak_not_per_execution(
    batched, private, caplog
):
    server = private("postgres")
    engine = sa.create_engine(server.url)
    create_table(engine)
    release = threading.Event()
    started: list[str] = []

    def blocked(instance, ctx) -> None:
        started.append(instance.id)
        release.wait(30)
        if instance.id == "raises":
            raise RuntimeError("the task's own failure")

    task = Tasks.one_time("blocked").execute(blocked)
    builder = (
        Scheduler.create(engine, task)
        .threads(6)
        .polling_interval(timedelta(milliseconds=100))
        .heartbeat_interval(timedelta(seconds=5))
        .shutdown_max_wait(timedelta(seconds=5))
        .listen_for_notifications(False)
        .scheduler_name("results-lost")
    )
    scheduler = (builder if batched else builder.batch_completions(False)).build()
    ids = ["raises", *(f"t{i}" for i in range(5))]
    for ident in ids:
        scheduler.schedule(task.instance(ident), datetime.now(UTC))
    caplog.set_level(logging.INFO, logger="ekbatan")
    try:
        scheduler.start()
        wait_until(lambda: len(started) == len(ids), timeout=30, message="every execution running")
        server.stop()
        caplog.clear()
        release.set()

        # every result (5 completions, 1 failure) failed to be written, in one streak
        wait_until(
            lambda: scheduler.runner.write_failures.failures_in_a_row == len(ids),
            timeout=30,
            message="every result's write failed",
        )
        # the streak's line is written just after the count, outside its lock, by a worker or
        # the group commit's thread: the log is read once they are stopped, the server still
        # down (a write after it is back would end the streak with a 'recovered' line)
        scheduler.stop()
        records = [r for r in caplog.records if r.name == "ekbatan.distributed_jobs.scheduler.execution"]
    finally:
        server.start()
        scheduler.stop()
        engine.dispose()
    messages = [r.getMessage() for r in records]
    # the task's own failure is logged as ever, with its traceback
    own = [
        r
        for r in records
        if "execution blocked/raises" in r.getMessage() and "the task's own failure" in r.getMessage()
    ]
    assert len(own) == 1 and own[0].exc_info, messages
    # the lost results: one line for the streak, no ERROR and no traceback per execution
    assert not [r for r in records if r.levelno >= logging.ERROR], messages
    lost = [m for m in messages if m.startswith("recording execution results")]
    assert len(lost) == 1, messages
    assert "retrying" not in lost[0] and "OperationalError" in lost[0], lost


def test_a_drivers_own_error_is_a_database_error_logged_without_a_traceback():
    import psycopg
    import pymysql

    from ekbatan.distributed_jobs.scheduler._liveness.outage import is_database_error

    assert is_database_error(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_database_error(pymysql.err.OperationalError(2013, "Lost connection"))
    assert not is_database_error(KeyError("a bug"))
    # the network on the way to the server is; any other OSError (a user's missing file) is not
    assert is_database_error(ConnectionRefusedError(111, "Connection refused"))
    assert is_database_error(TimeoutError("timed out"))
    assert is_database_error(socket.gaierror(-2, "Name or service not known"))
    assert not is_database_error(FileNotFoundError(2, "No such file or directory", "report.csv"))
