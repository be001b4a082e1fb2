"""``JobRegistry.builder()`` without a database — its validations and the dialect pinned from
the URL without connecting — and the ``@distributed_job`` marker.

Every build here points at hosts that do not resolve (``.invalid``, RFC 2606): building must
never open a connection, which a ``do_connect`` listener on each engine double-checks.
"""

from __future__ import annotations

import types
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import registry as sqlalchemy_dialects
from sqlalchemy.engine.default import DefaultDialect

from ekbatan.core import ConnectionProvider
from ekbatan.distributed_jobs import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DistributedJob,
    JobRegistry,
    Schedule,
    Schedules,
    distributed_job,
    is_distributed_job,
)
from ekbatan.distributed_jobs.scheduler import Scheduler, SchedulerBuilder

PG_URL = "postgresql+psycopg://app:secret@pg.invalid:5432/app"
MARIADB_URL = "mariadb+pymysql://app:secret@mariadb.invalid:3306/app"
MYSQL_URL = "mysql+pymysql://app:secret@mysql.invalid:3306/app"
UNREACHABLE = {"postgresql": PG_URL, "mariadb": MARIADB_URL, "mysql": MYSQL_URL}


class Job(DistributedJob):
    def __init__(self, name: str = "report", schedule: Schedule | None = None) -> None:
        self._name = name
        self._schedule = (
            schedule if schedule is not None else Schedules.fixed_delay(timedelta(milliseconds=100))
        )

    def name(self) -> str:
        return self._name

    def schedule(self) -> Schedule:
        return self._schedule

    def execute(self, ctx) -> None:
        return None


class NullScheduleJob(Job):
    def schedule(self):
        return None


class CountingJob(Job):
    """An unstable name (a counter suffix): only its first answer may ever be used."""

    def __init__(self) -> None:
        super().__init__()
        self.name_calls = 0
        self.schedule_calls = 0

    def name(self) -> str:
        self.name_calls += 1
        return f"unstable-{self.name_calls}"

    def schedule(self) -> Schedule:
        self.schedule_calls += 1
        return super().schedule()


def never_connecting(url: str) -> sa.Engine:
    engine = sa.create_engine(url)

    @sa.event.listens_for(engine, "do_connect")
    def refuse(*_args):
        raise AssertionError(f"building a JobRegistry opened a connection to {url}")

    return engine


@pytest.fixture
def engine():
    eng = never_connecting(PG_URL)
    yield eng
    eng.dispose()


def builder(engine: sa.Engine):
    return JobRegistry.builder().connection_provider(engine).register_shutdown_hook(False)


# --------------------------------------------------------------------------- validations
def test_missing_connection_provider_is_refused():
    with pytest.raises(ValueError, match="connection_provider is required"):
        JobRegistry.builder().with_job(Job()).build()


def test_connection_provider_of_another_kind_is_refused():
    with pytest.raises(TypeError, match="ConnectionProvider or an SQLAlchemy Engine, got str"):
        JobRegistry.builder().connection_provider(PG_URL).with_job(Job()).build()


def test_none_job_is_refused_immediately():
    b = JobRegistry.builder()
    with pytest.raises(ValueError, match="job cannot be None"):
        b.with_job(None)
    with pytest.raises(ValueError, match="jobs cannot be None"):
        b.with_jobs(None)
    with pytest.raises(ValueError, match="None job"):
        b.with_jobs([Job("a"), None])


def test_at_least_one_job_is_required(engine):
    with pytest.raises(ValueError, match="at least one DistributedJob must be registered"):
        builder(engine).build()
    with pytest.raises(ValueError, match="at least one DistributedJob must be registered"):
        builder(engine).with_jobs([]).build()


def test_names_must_be_unique(engine):
    with pytest.raises(ValueError, match="DistributedJob names must be unique") as raised:
        builder(engine).with_job(Job("duplicate-name")).with_jobs(
            [Job("other"), Job("duplicate-name")]
        ).build()
    assert "duplicate-name" in str(raised.value)
    assert "other" not in str(raised.value)


class OtherReport(Job):
    """Another class answering the same name(): the error must lead to both classes."""


def test_two_classes_with_one_name_are_both_named(engine):
    with pytest.raises(ValueError, match="DistributedJob names must be unique") as raised:
        builder(engine).with_jobs([Job("report"), Job("other"), OtherReport("report")]).build()
    message = str(raised.value)
    assert f"'report' is the name() of both {__name__}.Job and {__name__}.OtherReport" in message
    assert "'other'" not in message


def test_every_clash_names_its_classes(engine):
    with pytest.raises(ValueError) as raised:
        builder(engine).with_jobs(
            [Job("a"), OtherReport("a"), NullScheduleJob("a"), Job("b"), Job("b")]
        ).build()
    message = str(raised.value)
    assert (
        f"'a' is the name() of {__name__}.Job, {__name__}.OtherReport and {__name__}.NullScheduleJob"
        in message
    )
    assert f"'b' is the name() of 2 instances of {__name__}.Job" in message


def test_none_schedule_is_refused_naming_the_job(engine):
    with pytest.raises(ValueError, match="schedule()") as raised:
        builder(engine).with_job(NullScheduleJob("daily-report")).build()
    assert "'daily-report'" in str(raised.value)
    assert "None" in str(raised.value)


@pytest.mark.parametrize("blank", ["", "   ", "\t", None])
def test_blank_names_are_refused_naming_the_class(engine, blank):
    with pytest.raises(ValueError, match=r"returned a blank name\(\)") as raised:
        builder(engine).with_job(Job(blank)).build()
    message = str(raised.value)
    assert f"{Job.__module__}.{Job.__qualname__}" in message
    assert repr(blank) in message


def test_name_and_schedule_are_read_exactly_once(engine):
    job = CountingJob()
    registry = builder(engine).with_job(job).build()
    assert (job.name_calls, job.schedule_calls) == (1, 1)
    assert registry.job_names == ("unstable-1",)
    assert [t.name for t in registry.scheduler._startup.tasks] == ["unstable-1"]


def test_valid_job_builds_with_the_shutdown_hook_off(engine):
    registry = builder(engine).with_job(Job("valid")).build()
    assert isinstance(registry, JobRegistry)
    assert registry.job_names == ("valid",)
    assert registry.scheduler.options.shutdown_hook is False
    assert (
        JobRegistry.builder()
        .connection_provider(engine)
        .with_job(Job())
        .build()
        .scheduler.options.shutdown_hook
    )


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-1), timedelta(minutes=-10)])
def test_poll_interval_must_be_positive(engine, interval):
    with pytest.raises(ValueError, match="poll_interval must be positive.*tight loop"):
        builder(engine).with_job(Job()).poll_interval(interval).build()


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-1)])
def test_heartbeat_interval_must_be_positive(engine, interval):
    with pytest.raises(ValueError, match="heartbeat_interval must be positive"):
        builder(engine).with_job(Job()).heartbeat_interval(interval).build()


def test_shutdown_max_wait_may_be_zero_but_not_negative(engine):
    with pytest.raises(ValueError, match="shutdown_max_wait must be zero or positive"):
        builder(engine).with_job(Job()).shutdown_max_wait(timedelta(seconds=-1)).build()
    registry = builder(engine).with_job(Job()).shutdown_max_wait(timedelta(0)).build()
    assert registry.scheduler.shutdown_max_wait == timedelta(0)


def test_sub_millisecond_poll_interval_is_accepted(engine):
    registry = builder(engine).with_job(Job()).poll_interval(timedelta(microseconds=500)).build()
    assert registry.scheduler.polling_interval == timedelta(microseconds=500)


# --------------------------------------------------------------------------- defaults
def test_defaults_heartbeat_10s_times_6_and_one_thread_per_job(engine):
    registry = builder(engine).with_jobs([Job("a"), Job("b"), Job("c", Schedules.disabled())]).build()
    scheduler = registry.scheduler
    assert timedelta(seconds=10) == DEFAULT_HEARTBEAT_INTERVAL
    assert scheduler.heartbeat_interval == timedelta(seconds=10)  # the engine's own default is 5 min
    assert scheduler.heartbeat_interval * scheduler.missed_heartbeats_limit == timedelta(seconds=60)
    assert scheduler.polling_interval == timedelta(seconds=10)
    assert scheduler.shutdown_max_wait == timedelta(minutes=30)
    assert scheduler.threads == 3  # every job, disabled ones included, has a worker of its own
    assert sorted(t.name for t in scheduler._startup.tasks) == ["a", "b", "c"]


def test_the_engine_alone_would_heartbeat_every_5_minutes(engine):
    assert Scheduler.create(engine).build().heartbeat_interval == timedelta(minutes=5)


def test_knobs_reach_the_engine(engine):
    registry = (
        builder(engine)
        .with_job(Job())
        .poll_interval(timedelta(seconds=2))
        .heartbeat_interval(timedelta(seconds=30))
        .shutdown_max_wait(timedelta(seconds=5))
        .build()
    )
    s = registry.scheduler
    assert (s.polling_interval, s.heartbeat_interval, s.shutdown_max_wait) == (
        timedelta(seconds=2),
        timedelta(seconds=30),
        timedelta(seconds=5),
    )


def test_missed_heartbeats_limit_reaches_the_engine_from_the_builder(engine):
    built = builder(engine).with_job(Job()).missed_heartbeats_limit(8).build().scheduler
    assert built.missed_heartbeats_limit == 8
    assert built.heartbeat_interval * built.missed_heartbeats_limit == timedelta(seconds=80)
    # not set, the limit stays the engine's 6
    assert builder(engine).with_job(Job()).build().scheduler.missed_heartbeats_limit == 6


@pytest.mark.parametrize("limit", [3, 0, -1, 4.5, True])
def test_missed_heartbeats_limit_below_four_is_refused_naming_the_value(engine, limit):
    with pytest.raises(ValueError, match="missed_heartbeats_limit must be an int of at least 4") as raised:
        builder(engine).with_job(Job()).missed_heartbeats_limit(limit).build()
    assert f"got {limit!r}" in str(raised.value)


# --------------------------------------------------------------------------- customizer
def test_customizer_runs_last_and_can_override_the_facade(engine):
    seen: list[tuple[str, object]] = []

    def first(b: SchedulerBuilder) -> None:
        # what the facade configured is already there when the customizer runs
        seen.append(("first", (b._polling_interval, b._heartbeat_interval, b._threads)))
        b.polling_interval(timedelta(milliseconds=50)).threads(7).missed_heartbeats_limit(8)

    def second(b: SchedulerBuilder) -> None:
        seen.append(("second", b._threads))
        b.heartbeat_interval(timedelta(seconds=3))

    registry = (
        builder(engine)
        .with_job(Job())
        .poll_interval(timedelta(seconds=10))
        .heartbeat_interval(timedelta(seconds=30))
        .customize_scheduler(first)
        .customize_scheduler(second)
        .build()
    )
    assert seen == [("first", (timedelta(seconds=10), timedelta(seconds=30), 1)), ("second", 7)]
    s = registry.scheduler
    assert s.polling_interval == timedelta(milliseconds=50)
    assert s.threads == 7
    assert s.heartbeat_interval == timedelta(seconds=3)
    assert s.heartbeat_interval * s.missed_heartbeats_limit == timedelta(seconds=24)


def test_customizer_cannot_go_below_four_missed_heartbeats(engine):
    with pytest.raises(ValueError, match="at least 4"):
        builder(engine).with_job(Job()).customize_scheduler(lambda b: b.missed_heartbeats_limit(3)).build()


def test_none_customizer_is_refused():
    with pytest.raises(ValueError, match="customizer cannot be None"):
        JobRegistry.builder().customize_scheduler(None)


# --------------------------------------------------------------------------- dialect pinning
def captured_dialect(provider):
    seen = []
    registry = (
        JobRegistry.builder()
        .connection_provider(provider)
        .with_job(Job())
        .register_shutdown_hook(False)
        .customize_scheduler(lambda b: seen.append(b.resolved_dialect))
        .build()
    )
    assert len(seen) == 1
    assert registry.scheduler.repository.dialect.name == seen[0].name
    return seen[0]


@pytest.mark.parametrize(("family", "url"), UNREACHABLE.items())
def test_dialect_is_pinned_from_an_engine_url_without_connecting(family, url):
    engine = never_connecting(url)
    try:
        dialect = captured_dialect(engine)
    finally:
        engine.dispose()
    assert dialect is not None
    assert dialect.name == family
    assert dialect.limit(10) == " LIMIT 10"
    assert "FETCH FIRST" not in dialect.limit(10)


@pytest.mark.parametrize(("family", "url"), UNREACHABLE.items())
def test_dialect_is_pinned_from_a_connection_provider_without_connecting(family, url):
    provider = ConnectionProvider.from_url(url)
    sa.event.listen(provider.engine, "do_connect", lambda *a: pytest.fail(f"connected to {url}"))
    try:
        dialect = captured_dialect(provider)
    finally:
        provider.close()
    assert dialect.name == family == provider.dialect.value
    assert dialect.limit(10) == " LIMIT 10"


def test_mariadb_reached_through_a_mysql_url_is_treated_as_mysql():
    # a URL cannot reveal the server; write mariadb+pymysql:// for MariaDB
    engine = never_connecting("mysql+pymysql://app@mariadb-server.invalid/app")
    try:
        assert captured_dialect(engine).name == "mysql"
    finally:
        engine.dispose()


class AcmeDialect(DefaultDialect):
    """A third-party SQLAlchemy dialect the scheduler has no SQL for."""

    name = "acmedb"
    driver = "acme"
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls):
        return types.SimpleNamespace(paramstyle="qmark")


sqlalchemy_dialects.register("acmedb", __name__, "AcmeDialect")


def test_unknown_url_scheme_is_refused_never_guessed():
    engine = never_connecting("acmedb://app@db.invalid/app")
    try:
        with pytest.raises(
            ValueError, match="cannot tell the database dialect from URL scheme 'acmedb'"
        ) as raised:
            JobRegistry.builder().connection_provider(engine).with_job(Job()).build()
    finally:
        engine.dispose()
    assert "postgresql" in str(raised.value)
    assert "mariadb" in str(raised.value)


def test_customizer_may_name_the_dialect_of_an_unknown_url():
    # e.g. a PostgreSQL-compatible database under its own scheme: choosing is explicit
    engine = never_connecting("acmedb://app@db.invalid/app")
    try:
        registry = (
            JobRegistry.builder()
            .connection_provider(engine)
            .with_job(Job())
            .register_shutdown_hook(False)
            .customize_scheduler(lambda b: b.dialect("postgresql"))
            .build()
        )
    finally:
        engine.dispose()
    assert registry.scheduler.repository.dialect.name == "postgresql"


def test_building_against_an_unreachable_host_does_not_wait_for_it():
    # nothing to wait for: never_connecting fails the build at its first connection attempt
    for url in UNREACHABLE.values():
        engine = never_connecting(url)
        builder(engine).with_job(Job()).build()
        engine.dispose()


# --------------------------------------------------------------------------- @distributed_job
def test_marker_only_tags_the_class():
    created = []

    class Tracked(Job):
        def __init__(self) -> None:
            created.append(self)
            super().__init__()

    before = dict(vars(Tracked))
    marked = distributed_job(Tracked)
    assert marked is Tracked
    assert set(vars(Tracked)) - set(before) == {"__ekbatan_distributed_job__"}
    assert created == []  # nothing was instantiated, nothing registered
    assert is_distributed_job(Tracked)


def test_marker_as_a_decorator():
    @distributed_job
    class Nightly(Job):
        pass

    assert is_distributed_job(Nightly)
    assert not is_distributed_job(Nightly())  # instances are not "marked classes"
    assert not is_distributed_job(Job)


def test_marker_rejects_classes_that_are_not_jobs():
    class NotAJob:
        pass

    with pytest.raises(TypeError, match="NotAJob") as raised:
        distributed_job(NotAJob)
    assert "DistributedJob" in str(raised.value)
    with pytest.raises(TypeError, match="DistributedJob"):
        distributed_job(lambda: None)
    with pytest.raises(TypeError, match="DistributedJob"):
        distributed_job(Job())
    assert not hasattr(NotAJob, "__ekbatan_distributed_job__")


def test_unmarked_subclass_of_a_marked_job_is_not_marked():
    @distributed_job
    class Marked(Job):
        pass

    class Unmarked(Marked):
        pass

    assert is_distributed_job(Marked)
    assert not is_distributed_job(Unmarked)


def test_a_job_must_implement_the_three_methods():
    class Incomplete(DistributedJob):
        def name(self) -> str:
            return "incomplete"

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
