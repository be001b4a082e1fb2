"""EkbatanContainer as a container over build_runtime: every option reaches the runtime (through
its own provider or through ``options``), building and starting are the runtime's (what fails
and when, what is logged, what is closed), and the application's providers reach discovered
classes."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from dependency_injector import containers, providers
from integrations_sample.handlers import DepositLedger
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import ConnectionProvider, DatabaseRegistry, JobsPoolNotConfiguredError
from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    JobsDatabaseUnavailableError,
    Schedule,
    Schedules,
)
from ekbatan.integrations import build_runtime
from ekbatan.integrations.di import EkbatanContainer
from ekbatan.integrations.options import EkbatanOptions
from ekbatan.integrations.runtime import load
from ekbatan.local_event_handler import EventFanoutJob
from testsupport import wait_until

UNREACHABLE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


class Container(EkbatanContainer):
    ledger = providers.Singleton(DepositLedger)


class Beat(DistributedJob):
    """A job the application builds itself and hands over with ``extra_jobs``."""

    def __init__(self) -> None:
        self.ran = threading.Event()

    def name(self) -> str:
        return "beat"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(milliseconds=100))

    def execute(self, ctx: JobContext) -> None:
        self.ran.set()


@pytest.fixture
def opened_pools(monkeypatch: pytest.MonkeyPatch) -> list[ConnectionProvider]:
    """Every ConnectionProvider created while the test runs."""
    pools: list[ConnectionProvider] = []
    real_init = ConnectionProvider.__init__

    def init(self: ConnectionProvider, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)
        pools.append(self)

    monkeypatch.setattr(ConnectionProvider, "__init__", init)
    return pools


@pytest.mark.parametrize("how", ["provider", "options"])
def test_require_database_false_starts_degraded_instead_of_failing(tmp_path, opened_pools, how):
    config = str(application_yml(tmp_path, UNREACHABLE_URL))
    strict = EkbatanContainer(config_path=config, packages=["integrations_sample.jobs"])
    with pytest.raises(JobsDatabaseUnavailableError, match=r"jobs-config.*127\.0\.0\.1:1"):
        strict.init_resources()
    # a failed start stops the runtime at once, as leaving ``with runtime:`` does
    assert opened_pools and all(pool.closed for pool in opened_pools)
    strict.shutdown_resources()

    if how == "provider":
        degraded = EkbatanContainer(
            config_path=config, packages=["integrations_sample.jobs"], require_database=False
        )
    else:
        degraded = EkbatanContainer(
            options=EkbatanOptions(
                config=config, packages=("integrations_sample.jobs",), require_database=False
            )
        )
    degraded.init_resources()
    try:
        registry = degraded.job_registry()
        assert registry.waiting_for_database
        assert registry.scheduler.startup_tasks_pending  # written once the database answers
    finally:
        degraded.shutdown_resources()
    assert all(pool.closed for pool in opened_pools)


def test_extra_jobs_and_handlers_join_the_discovered_ones(tmp_path):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path), handling=False)
    beat = Beat()
    ledger = DepositLedger()
    from integrations_sample.handlers import DepositCounter

    counter = DepositCounter(ledger)
    container = EkbatanContainer(
        config_path=str(config),
        packages=["integrations_sample.domain"],
        migrate_on_start=True,
        extra_jobs=[beat],
        extra_handlers=[counter],
    )
    container.init_resources()
    try:
        assert container.job_registry().job_names == ("beat", "ekbatan-event-fanout")
        assert container.event_handlers() == [counter]
        assert [type(job) for job in container.jobs()] == [Beat, EventFanoutJob]
        wait_until(beat.ran.is_set, timeout=10, message="the extra job ran")
    finally:
        container.shutdown_resources()


def test_customize_scheduler_and_extra_tasks_reach_the_runtime(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    customized = []

    class Customizing(Container):
        customize_scheduler = providers.Object(customized.append)

    container = Customizing(config_path=str(config), packages=["integrations_sample.jobs"], extra_tasks=[])
    try:
        runtime = container.runtime()
        assert len(customized) == 1  # the engine's builder, handed over while the registry was built
        assert runtime.options.customize_scheduler == customized.append
        assert runtime.options.extra_tasks == ()
        assert not runtime.started  # a part asked for before init_resources() is built, not started
    finally:
        container.shutdown_resources()


def test_every_pool_opened_is_closed_by_shutdown_resources(tmp_path, opened_pools):
    # Without a job there is no job registry, so the scheduler client opens the jobs pool on
    # demand: the runtime closes it with the others.
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    container = Container(
        config_path=str(config), packages=["integrations_sample.domain"], migrate_on_start=True
    )
    container.init_resources()
    try:
        assert container.job_registry() is None
        client = container.scheduler_client()
        assert client.get_scheduled_executions() == []  # the client works: its pool is open
        assert len(opened_pools) >= 2  # the shard's pool and the jobs pool
    finally:
        container.shutdown_resources()
    assert all(pool.closed for pool in opened_pools), [p for p in opened_pools if not p.closed]


def test_a_started_container_closes_every_pool_after_the_jobs_stop(tmp_path, opened_pools):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    container = Container(config_path=str(config), packages=["integrations_sample"], migrate_on_start=True)
    container.init_resources()
    assert container.job_registry().scheduler.is_started
    container.shutdown_resources()
    assert all(pool.closed for pool in opened_pools), [p for p in opened_pools if not p.closed]


def test_migration_reports_are_logged_when_migrate_on_start(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ekbatan.integrations")
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    container = EkbatanContainer(config_path=str(config), packages=["integrations_sample.domain"])
    container.migrate_on_start.override(True)
    container.init_resources()
    try:
        assert container.migrations() is True
    finally:
        container.shutdown_resources()
    reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith("migrations: ")]
    assert reports, [r.getMessage() for r in caplog.records]


def test_a_missing_jobs_pool_fails_where_build_runtime_fails(tmp_path, opened_pools):
    # build_runtime refuses a job without a jobs pool while building, so any part asked for
    # fails the same way, not only init_resources()
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    with pytest.raises(JobsPoolNotConfiguredError) as direct:
        build_runtime(str(config), ["integrations_sample.jobs"])
    container = EkbatanContainer(config_path=str(config), packages=["integrations_sample.jobs"])
    with pytest.raises(JobsPoolNotConfiguredError) as through_container:
        container.action_executor()
    assert str(through_container.value) == str(direct.value)
    assert all(pool.closed for pool in opened_pools)


def test_option_providers_win_over_options_and_an_override_wins_over_both(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    in_options = application_yml(
        first, f"sqlite:///{first / 'app.sqlite'}", extra={"namespace": "in_options"}
    )
    overriding = application_yml(
        second, f"sqlite:///{second / 'app.sqlite'}", extra={"namespace": "overriding"}
    )
    container = EkbatanContainer(options=EkbatanOptions(config=str(in_options)))
    try:
        assert container.settings().namespace == "in_options"
    finally:
        container.shutdown_resources()
    container.config_path.override(str(overriding))
    try:
        assert container.settings().namespace == "overriding"
        assert container.runtime().settings.namespace == "overriding"
    finally:
        container.shutdown_resources()


class Services(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)
    mailer = providers.Object("the application's mailer")


def test_both_the_subclass_and_the_application_container_are_offered(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", handling=False)
    services = Services()

    class WithAudit(EkbatanContainer):
        ledger = providers.Singleton(DepositLedger)  # the application container's wins by name
        audit = providers.Object("the subclass's audit")

    container = WithAudit(
        config_path=str(config), packages=["integrations_sample.handlers"], application=services
    )
    try:
        (handler,) = container.event_handlers()
        assert handler.ledger is services.ledger()
        offered = container.runtime().options.container.providers
        assert {"ledger", "mailer", "audit"} <= set(offered)
        assert "action_executor" not in offered  # build_runtime offers its own parts itself
    finally:
        container.shutdown_resources()


def test_a_provider_of_the_application_that_needs_a_part_is_named_and_its_provider_works(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", handling=False)

    class Eager(EkbatanContainer):
        # DepositCounter needs ``ledger``, which would need the executor being built
        ledger = providers.Singleton(lambda executor: DepositLedger(), EkbatanContainer.action_executor)

    eager = Eager(config_path=str(config), packages=["integrations_sample.handlers"])
    try:
        with pytest.raises(
            RuntimeError,
            match=r"depends on a part of Ekbatan's runtime.*EkbatanContainer\.action_executor\.provider",
        ):
            eager.runtime()
    finally:
        eager.shutdown_resources()

    handed: list[object] = []

    def ledger_with(executor_provider: object) -> DepositLedger:
        handed.append(executor_provider)
        return DepositLedger()

    class Lazy(EkbatanContainer):
        ledger = providers.Singleton(ledger_with, EkbatanContainer.action_executor.provider)

    lazy = Lazy(config_path=str(config), packages=["integrations_sample.handlers"])
    try:
        runtime = lazy.runtime()
        (executor_provider,) = handed
        assert executor_provider() is runtime.action_executor
    finally:
        lazy.shutdown_resources()


class RegistryLedger(DepositLedger):
    """The application's service built on Ekbatan's registry."""

    def __init__(self, registry: DatabaseRegistry) -> None:
        super().__init__()
        self.registry = registry


@pytest.mark.parametrize("part", ["database_registry", "settings"])
def test_a_provider_of_the_application_may_depend_on_the_registry_or_the_settings(tmp_path, part):
    # They are the container's own resources, built before the runtime: a discovered handler
    # needing such a provider gets the very object the runtime was built with
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", handling=False)

    class OnRegistry(EkbatanContainer):
        ledger = providers.Singleton(RegistryLedger, getattr(EkbatanContainer, part))

    container = OnRegistry(config_path=str(config), packages=["integrations_sample.handlers"])
    try:
        (handler,) = container.event_handlers()
        assert isinstance(handler.ledger, RegistryLedger)
        assert handler.ledger is container.ledger()
        assert handler.ledger.registry is getattr(container.runtime(), part)
        assert handler.ledger.registry is getattr(container, part)()
    finally:
        container.shutdown_resources()


@pytest.mark.parametrize("how", ["override", "option"])
def test_a_failed_start_leaves_a_registry_of_the_application_open(tmp_path, opened_pools, how):
    # Ekbatan closes the pools it opened at once when the start fails, but not a registry the
    # application built and passed in: that one is the application's to close.
    mine = tmp_path / "mine"
    mine.mkdir()
    registry = DatabaseRegistry.from_config(
        load(str(application_yml(mine, f"sqlite:///{mine / 'a.sqlite'}")))
    )
    registry.primary()
    theirs = len(opened_pools)
    config = str(application_yml(tmp_path, UNREACHABLE_URL))
    if how == "override":
        container = EkbatanContainer(config_path=config, packages=["integrations_sample.jobs"])
        container.database_registry.override(providers.Object(registry))
    else:
        options = EkbatanOptions(
            config=config, packages=("integrations_sample.jobs",), database_registry=registry
        )
        container = EkbatanContainer(options=options)
    try:
        with pytest.raises(JobsDatabaseUnavailableError):
            container.init_resources()
        ours = opened_pools[theirs:]  # the jobs pool
        assert ours and all(pool.closed for pool in ours)
        assert not registry.primary().closed, "Ekbatan closed the application's registry"
        container.shutdown_resources()
        assert not registry.primary().closed, "Ekbatan closed the application's registry"
    finally:
        container.shutdown_resources()
        registry.close()
