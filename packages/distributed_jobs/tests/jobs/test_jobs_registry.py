"""``JobRegistry`` against real databases (PostgreSQL, MariaDB and SQLite): start-up
verification, disabled schedules, a job running on schedule, exclusivity across registries,
the customizer applied last, plus failures, ``async def`` jobs, the job context,
cooperative shutdown and bailing out on ``fraction_dead``.

Timings: fixed delay 200 ms, poll 50 ms, heartbeat 1 s, shutdown wait 2 s. A scenario that
counts runs waits for a number of them with a generous deadline; none asserts how fast they came.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider
from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    JobRegistry,
    JobRegistryError,
    Schedule,
    Schedules,
)
from ekbatan.distributed_jobs.scheduler import Execution, SchedulerClient, create_table
from testsupport import IsolatedDatabase, wait_until

pytestmark = pytest.mark.dialects("postgres", "mariadb", "sqlite")

FAST_DELAY = Schedules.fixed_delay(timedelta(milliseconds=200))
HOURLY = Schedules.fixed_delay(timedelta(hours=1))
RUNS = 5  # runs of the 200 ms job to wait for: a second's worth on an idle machine
RUNS_DEADLINE = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class RecordingJob(DistributedJob):
    """Records every run: (fencing token, start, end); ``work`` is the body, if any."""

    def __init__(self, name: str, schedule: Schedule = FAST_DELAY, work: Callable | None = None) -> None:
        self._name = name
        self._schedule = schedule
        self._work = work
        self._lock = threading.Lock()
        self.runs: list[tuple[int, float, float]] = []
        self.contexts: list[JobContext] = []

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return self._schedule

    def execute(self, ctx: JobContext) -> None:
        started = time.monotonic()
        with self._lock:
            self.contexts.append(ctx)
        try:
            if self._work is not None:
                self._work(ctx)
        finally:
            with self._lock:
                self.runs.append((ctx.fencing_token, started, time.monotonic()))

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.runs)


def assert_never_overlapping(runs: list[tuple[int, float, float]]) -> None:
    ordered = sorted(runs, key=lambda r: r[1])
    for earlier, later in itertools.pairwise(ordered):
        assert later[1] >= earlier[2], f"two runs of one job overlapped: {earlier} and {later}"
    tokens = [r[0] for r in ordered]
    assert tokens == sorted(set(tokens)), f"fencing tokens must strictly increase run after run: {tokens}"


@pytest.fixture
def started() -> Iterator[list[JobRegistry]]:
    """Registries to stop at the end of the test, whatever happened."""
    registries: list[JobRegistry] = []
    yield registries
    for registry in registries:
        registry.stop()


def build(provider, *jobs: DistributedJob, **options) -> JobRegistry:
    builder = (
        JobRegistry.builder()
        .connection_provider(provider)
        .with_jobs(jobs)
        .poll_interval(options.pop("poll", timedelta(milliseconds=50)))
        .heartbeat_interval(options.pop("heartbeat", timedelta(seconds=1)))
        .shutdown_max_wait(options.pop("shutdown", timedelta(seconds=2)))
        .register_shutdown_hook(False)
    )
    for customizer in options.pop("customize", ()):
        builder.customize_scheduler(customizer)
    assert not options, f"unknown options {options}"
    return builder.build()


def start(registries: list[JobRegistry], registry: JobRegistry) -> JobRegistry:
    registries.append(registry)
    registry.start()
    return registry


def row(engine: sa.Engine, name: str) -> Execution | None:
    """The job's row as another process would read it."""
    return SchedulerClient(engine).repository.get_execution(name, "recurring")


# --------------------------------------------------------------------------- start-up
def test_start_fails_loudly_when_the_table_is_missing(database: IsolatedDatabase, started):
    engine = database.engine()  # a fresh database: no migrations, no scheduled_tasks
    name = unique("unregistered")
    registry = build(engine, RecordingJob(name))
    started.append(registry)
    with pytest.raises(JobRegistryError) as raised:
        registry.start()
    assert name in str(raised.value)
    # a failed start leaves nothing running: the scheduler was stopped again
    assert not registry.scheduler.is_started and registry.scheduler.is_shutting_down
    create_table(engine)  # "migrations ran late": the table is there now, the job still has no row
    assert row(engine, name) is None


def readonly_pool(database: IsolatedDatabase, admin: sa.Engine) -> tuple[str, Callable[[], None]]:
    """A URL that may read ``scheduled_tasks`` but not write it, and how to clean up."""
    user = f"ro_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        if database.dialect == "postgres":
            schema = database.name
            conn.exec_driver_sql(f'CREATE ROLE "{user}" LOGIN')
            conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{user}"')
            conn.exec_driver_sql(f'GRANT SELECT ON "{schema}".scheduled_tasks TO "{user}"')
        else:
            conn.exec_driver_sql(f"CREATE USER '{user}'")  # any host
            conn.exec_driver_sql(f"GRANT SELECT ON {database.name}.scheduled_tasks TO '{user}'")
        conn.commit()

    def drop() -> None:
        with admin.connect() as conn:
            if database.dialect == "postgres":
                conn.exec_driver_sql(f'DROP OWNED BY "{user}"')
                conn.exec_driver_sql(f'DROP ROLE "{user}"')
            else:
                conn.exec_driver_sql(f"DROP USER '{user}'")
            conn.commit()

    url = sa.make_url(database.url).set(username=user)
    return url.render_as_string(hide_password=False), drop


@pytest.mark.dialects("postgres", "mariadb")  # grants: SQLite has no users
def test_start_fails_when_the_jobs_pool_cannot_write(database: IsolatedDatabase, engine, started):
    url, drop = readonly_pool(database, engine)
    readonly = sa.create_engine(url)
    try:
        enabled, disabled = unique("needs-a-row"), unique("off")
        registry = build(readonly, RecordingJob(enabled), RecordingJob(disabled, Schedules.disabled()))
        started.append(registry)
        with pytest.raises(JobRegistryError) as raised:
            registry.start()
        message = str(raised.value)
        assert f"1 of 1 job(s) were not registered: ['{enabled}']" in message  # disabled jobs are exempt
        assert "scheduled_tasks" in message
        assert "may write" in message
        registry.stop()
    finally:
        readonly.dispose()
        drop()


def test_start_succeeds_and_writes_the_row(database: IsolatedDatabase, engine, started):
    provider = ConnectionProvider.from_url(database.url, maximum_pool_size=2)
    try:
        name = unique("starts")
        job = RecordingJob(name)
        with build(provider, job) as registry:
            assert registry.job_names == (name,)
            assert row(engine, name) is not None  # verified by start() already
            wait_until(lambda: job.count >= 1, timeout=5, message="the job's first run")
    finally:
        provider.close()


def test_disabled_schedule_needs_no_row_and_removes_an_existing_one(engine, started):
    name = unique("toggled")
    with build(engine, RecordingJob(name, Schedules.disabled())):
        assert row(engine, name) is None

    enabled = RecordingJob(name, HOURLY)
    with build(engine, enabled):
        wait_until(lambda: enabled.count == 1, timeout=5, message="one run while enabled")
    assert row(engine, name) is not None

    disabled = RecordingJob(name, Schedules.disabled())
    with build(engine, disabled):
        assert row(engine, name) is None  # start-up removed it
    assert disabled.count == 0


# --------------------------------------------------------------------------- running
def test_single_instance_runs_on_schedule(engine, started):
    job = RecordingJob(unique("single"))
    start(started, build(engine, job))
    wait_until(lambda: job.count >= RUNS, RUNS_DEADLINE, message=f"{RUNS} runs")
    started.pop().stop()
    assert_never_overlapping(job.runs)


def test_two_registries_run_one_job_exclusively(engine, started):
    name = unique("shared")
    first, second = RecordingJob(name), RecordingJob(name)
    start(started, build(engine, first))
    start(started, build(engine, second))
    wait_until(lambda: first.count + second.count >= 2 * RUNS, RUNS_DEADLINE, message=f"{2 * RUNS} runs")
    while started:
        started.pop().stop()
    # Two uncoordinated schedulers would run each occurrence twice, side by side: the runs of
    # both would overlap and repeat fencing tokens. Coordinated, they form one sequence.
    assert_never_overlapping(first.runs + second.runs)


def test_customizer_runs_last(engine, started):
    calls = []

    def fast_polling(builder) -> None:
        calls.append(builder._polling_interval)
        builder.polling_interval(timedelta(milliseconds=50))

    name = unique("customized")
    job = RecordingJob(name, HOURLY)
    registry = build(engine, job, poll=timedelta(seconds=10), customize=[fast_polling])
    assert calls == [timedelta(seconds=10)]  # the facade's setting was in place; the customizer won
    assert registry.scheduler.polling_interval == timedelta(milliseconds=50)
    start(started, registry)
    wait_until(lambda: job.count == 1, timeout=5, message="the first run")
    # Make the row due from outside with plain SQL (no NOTIFY, no local wake-up): only polling
    # sees it, so five pick-ups within a second each need the customizer's 50 ms, not 10 s.
    make_due = sa.text(
        "UPDATE scheduled_tasks SET execution_time = last_success"
        " WHERE task_name = :n AND picked = :no AND last_success IS NOT NULL"
    )
    for expected in range(2, 7):

        def made_due() -> bool:
            with engine.begin() as conn:
                return conn.execute(make_due, {"n": name, "no": False}).rowcount == 1

        wait_until(made_due, timeout=2, message="the previous run completed")
        wait_until(
            lambda e=expected: job.count >= e, timeout=1.0, message=f"run {expected} picked up by polling"
        )


# --------------------------------------------------------------------------- failures
class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_failing_job_is_logged_once_recorded_and_the_next_slot_runs(engine, started, caplog, kind):
    name = unique(f"flaky-{kind}")
    seen_failures: list[int] = []

    class Flaky(DistributedJob):
        def name(self) -> str:
            return name

        def schedule(self) -> Schedule:
            return FAST_DELAY

        def _run(self, ctx: JobContext) -> None:
            seen_failures.append(ctx.consecutive_failures)
            if len(seen_failures) <= 2:
                raise Boom(f"boom {len(seen_failures)}")

        if kind == "sync":

            def execute(self, ctx: JobContext) -> None:
                self._run(ctx)

        else:

            async def execute(self, ctx: JobContext) -> None:
                await asyncio.sleep(0)
                self._run(ctx)

    caplog.set_level(logging.INFO)
    start(started, build(engine, Flaky()))
    wait_until(lambda: len(seen_failures) >= 3, timeout=5, message="two failures and a success")
    wait_until(
        lambda: row(engine, name).consecutive_failures == 0 and not row(engine, name).picked, timeout=2
    )
    started.pop().stop()

    # each run saw the failures recorded in the row before it
    assert seen_failures[:3] == [0, 1, 2]
    final = row(engine, name)
    assert final.last_failure is not None and final.last_success is not None
    assert final.last_success > final.last_failure

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, [r.getMessage() for r in errors]  # once per failure, not twice
    for number, record in enumerate(errors, start=1):
        assert name in record.getMessage()
        assert f"Boom: boom {number}" in record.getMessage()
        assert record.exc_info is not None and isinstance(record.exc_info[1], Boom)


def test_async_job_runs_on_an_event_loop(engine, started):
    name = unique("async")
    loops: list[asyncio.AbstractEventLoop] = []

    class AsyncJob(DistributedJob):
        def name(self) -> str:
            return name

        def schedule(self) -> Schedule:
            return FAST_DELAY

        async def execute(self, ctx: JobContext) -> None:
            await asyncio.sleep(0.01)
            loops.append(asyncio.get_running_loop())

    start(started, build(engine, AsyncJob()))
    wait_until(lambda: len(loops) >= 3, timeout=5, message="three async runs")
    wait_until(lambda: row(engine, name).last_success is not None, timeout=2)
    assert row(engine, name).consecutive_failures == 0


# --------------------------------------------------------------------------- the context
def test_context_describes_the_execution_and_the_fencing_token(engine, started):
    name = unique("context")
    inside, release = threading.Event(), threading.Event()

    def hold(ctx: JobContext) -> None:
        inside.set()
        assert release.wait(5)

    job = RecordingJob(name, HOURLY, hold)
    start(started, build(engine, job))
    assert inside.wait(5)
    ctx = job.contexts[0]
    during = row(engine, name)
    assert during.picked
    assert ctx.fencing_token == during.version  # the row's version while this run holds it
    assert ctx.job_name == name
    assert ctx.picked_by == during.picked_by
    assert ctx.execution_time == during.execution_time
    assert ctx.consecutive_failures == 0
    assert not ctx.is_shutting_down
    assert 0.0 <= ctx.heartbeat_state.fraction_dead < 0.5
    assert not ctx.heartbeat_state.has_stale_heartbeat
    assert ctx.heartbeat_state.failed_heartbeats == 0
    assert name in repr(ctx)
    release.set()
    wait_until(lambda: not row(engine, name).picked, timeout=2)
    after = row(engine, name)
    assert (
        after.version == ctx.fencing_token + 1
    )  # completion moved on; a stale write with the old token loses
    assert after.execution_time - after.last_success == timedelta(hours=1)


def test_stop_tells_a_running_job_that_it_is_shutting_down(engine, started):
    name = unique("cooperative")
    observed = []

    def until_shutdown(ctx: JobContext) -> None:
        while not ctx.is_shutting_down:
            time.sleep(0.01)
        observed.append(True)

    job = RecordingJob(name, HOURLY, until_shutdown)
    registry = start(started, build(engine, job, shutdown=timedelta(minutes=10)))
    wait_until(lambda: row(engine, name).picked, timeout=5, message="the job is running")
    stopping = threading.Thread(target=started.pop().stop, daemon=True)
    stopping.start()
    # a job that ignored the flag would hold stop() for 2 × 10 minutes
    stopping.join(60)
    assert not stopping.is_alive(), "stop() waited for the job: it did not return when asked"
    assert observed == [True]
    final = row(engine, name)
    assert not final.picked and final.last_success is not None  # a normal completion
    assert registry.scheduler.is_shutting_down


# --------------------------------------------------------------------------- bailing out
BAIL_HEARTBEAT = timedelta(milliseconds=200)  # × 4 missed = 800 ms until another instance may revive


class ItemLoopJob(DistributedJob):
    """Works through ``total`` items, one at a time, checking its standing before each (seed 001).

    The first run is slow (20 ms an item) so that it cannot finish before trouble starts;
    later runs are quick. Remembers where it stopped, as a real job would in its own tables.
    """

    def __init__(self, name: str, total: int = 200) -> None:
        self._name = name
        self.total = total
        self.done: list[int] = []
        self.bail_outs: list[dict] = []
        self.tokens: list[int] = []
        self.finished = threading.Event()

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return HOURLY

    def execute(self, ctx: JobContext) -> None:
        self.tokens.append(ctx.fencing_token)
        first_run = len(self.tokens) == 1
        health = ctx.heartbeat_state
        for item in range(len(self.done), self.total):
            if health.fraction_dead > 0.5:
                self.bail_outs.append(
                    {
                        "at_item": item,
                        "fraction_dead": health.fraction_dead,
                        "failed_heartbeats": health.failed_heartbeats,
                        "stale": health.has_stale_heartbeat,
                    }
                )
                return  # a normal return: a success as far as the scheduler is concerned
            time.sleep(0.02 if first_run else 0.001)
            self.done.append(item)
        self.finished.set()


def bail_out_registry(engine: sa.Engine, job: ItemLoopJob) -> JobRegistry:
    return build(
        engine,
        job,
        heartbeat=BAIL_HEARTBEAT,
        customize=[lambda b: b.missed_heartbeats_limit(4)],
    )


def test_job_bails_out_when_its_row_is_taken_away_and_the_next_run_finishes(engine, started, caplog):
    name = unique("bail-taken")
    job = ItemLoopJob(name)
    start(started, bail_out_registry(engine, job))
    wait_until(lambda: len(job.done) >= 3, timeout=5, message="the first run is working")
    with engine.begin() as conn:  # another instance touched the row: this run's heartbeats now miss
        bumped = conn.execute(
            sa.text("UPDATE scheduled_tasks SET version = version + 1 WHERE task_name = :n"), {"n": name}
        ).rowcount
    assert bumped == 1

    wait_until(lambda: job.bail_outs, timeout=3, message="the job bails out")
    bail = job.bail_outs[0]
    assert bail["fraction_dead"] > 0.5
    assert bail["failed_heartbeats"] >= 1 and bail["stale"]
    assert bail["at_item"] < job.total

    # The bail-out's completion is fenced off (the version moved), so the row is revived as a
    # dead execution and the next run picks up the remaining items, then completes normally.
    assert job.finished.wait(5), "the revived run did not finish the remaining items"
    wait_until(lambda: not row(engine, name).picked, timeout=2)
    final = row(engine, name)
    assert final.consecutive_failures == 0 and final.last_success is not None
    assert final.execution_time - final.last_success == timedelta(hours=1)
    assert job.done == list(range(job.total))  # every item exactly once: nothing lost, nothing twice
    assert len(job.tokens) == 2 and job.tokens[1] > job.tokens[0] + 1
    # a job's failure is logged by its worker thread after the run ends: read once it stopped
    started.pop().stop()
    job_errors = [
        r for r in caplog.records if r.levelno >= logging.ERROR and f"job {name} failed" in r.getMessage()
    ]
    assert job_errors == []  # bailing out is not a failure of the job


REFUSE_HEARTBEATS = {
    # heartbeat writes keep version and picked; claims and completions change the version
    "postgres": [
        """CREATE FUNCTION refuse_heartbeats() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.version = OLD.version AND OLD.picked AND NEW.picked THEN
               RAISE EXCEPTION 'heartbeats refused';
             END IF;
             RETURN NEW;
           END $$""",
        """CREATE TRIGGER refuse_heartbeats BEFORE UPDATE ON scheduled_tasks
           FOR EACH ROW EXECUTE FUNCTION refuse_heartbeats()""",
    ],
    "mariadb": [
        """CREATE TRIGGER refuse_heartbeats BEFORE UPDATE ON scheduled_tasks FOR EACH ROW
           BEGIN
             IF NEW.version = OLD.version AND OLD.picked AND NEW.picked THEN
               SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'heartbeats refused';
             END IF;
           END""",
    ],
    "sqlite": [
        """CREATE TRIGGER refuse_heartbeats BEFORE UPDATE ON scheduled_tasks
           WHEN NEW.version = OLD.version AND OLD.picked AND NEW.picked
           BEGIN SELECT RAISE(ABORT, 'heartbeats refused'); END""",
    ],
}


def test_job_bails_out_when_heartbeats_fail_and_is_rescheduled_normally(engine, dialect, started):
    name = unique("bail-refused")
    job = ItemLoopJob(name)
    start(started, bail_out_registry(engine, job))
    wait_until(lambda: len(job.done) >= 3, timeout=5, message="the first run is working")
    token = job.tokens[0]
    with engine.begin() as conn:  # the database stops accepting this run's heartbeats
        for statement in REFUSE_HEARTBEATS[dialect]:
            conn.exec_driver_sql(statement)

    wait_until(lambda: job.bail_outs, timeout=3, message="the job bails out")
    bail = job.bail_outs[0]
    assert bail["fraction_dead"] > 0.5
    assert bail["failed_heartbeats"] >= 1 and bail["stale"]

    # Returning early is a success: the row is rescheduled per the schedule, right away.
    wait_until(lambda: not row(engine, name).picked, timeout=2, message="the completion is recorded")
    final = row(engine, name)
    assert final.version == token + 1  # this run's own completion, not a revival
    assert final.consecutive_failures == 0 and final.last_success is not None
    assert final.execution_time - final.last_success == timedelta(hours=1)
    assert len(job.tokens) == 1 and not job.finished.is_set()
