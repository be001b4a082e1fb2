"""EkbatanContainer: the product as a dependency-injector container."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
import sqlalchemy as sa
from dependency_injector import containers, providers
from integrations_sample.domain import Base, Deposit, DepositParams, Wallet
from integrations_sample.handlers import DepositLedger
from integrations_sample.jobs import TOP_UP_WALLET
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import (
    ActionExecutor,
    DatabaseRegistry,
    JobsPoolNotConfiguredError,
    migrate,
    settings_from_document,
)
from ekbatan.distributed_jobs import JobRegistry
from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.integrations.di import EkbatanContainer
from ekbatan.integrations.runtime import load
from ekbatan.local_event_handler import EventFanoutJob, EventHandlingJob
from testsupport import wait_until


class Container(EkbatanContainer):
    """The application extends Ekbatan's container with its own providers."""

    ledger = providers.Singleton(DepositLedger)


def configured(container: EkbatanContainer, config, packages) -> EkbatanContainer:
    container.config_path.override(str(config))
    container.packages.override(packages)
    return container


def test_no_job_and_no_handler_means_no_job_registry(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    container = configured(EkbatanContainer(), config, ["integrations_sample.domain"])
    container.init_resources()
    try:
        assert container.job_registry() is None
        assert isinstance(container.action_executor(), ActionExecutor)
        assert isinstance(container.database_registry(), DatabaseRegistry)
        assert container.settings().namespace == "wallet"
    finally:
        container.shutdown_resources()


def test_a_job_without_a_jobs_pool_fails_at_start_naming_the_key(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    container = configured(EkbatanContainer(), config, ["integrations_sample.jobs"])
    try:
        with pytest.raises(
            JobsPoolNotConfiguredError, match=r"members\[0\]\.configs\.jobs-config is not set"
        ):
            container.init_resources()
    finally:
        container.shutdown_resources()


def test_handling_joins_only_when_enabled(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    off = configured(
        Container(), application_yml(tmp_path, url, handling=False), ["integrations_sample.handlers"]
    )
    assert [type(j) for j in off.jobs()] == [EventFanoutJob]
    off.shutdown_resources()
    on = configured(
        Container(), application_yml(tmp_path, url, handling=True), ["integrations_sample.handlers"]
    )
    assert [type(j) for j in on.jobs()] == [EventFanoutJob, EventHandlingJob]
    on.shutdown_resources()


def test_camel_and_kebab_settings_bind_the_same(tmp_path):
    document = {
        "ekbatan": {
            "namespace": "wallet",
            "localEventHandler": {"handlingPollDelay": "PT0.2S", "handling": {"enabled": True}},
            "sharding": {
                "defaultShard": {"group": 0, "member": 0},
                "groups": [
                    {
                        "group": 0,
                        "name": "global",
                        "members": [
                            {
                                "member": 0,
                                "configs": {
                                    "primaryConfig": {"url": f"sqlite:///{tmp_path / 'a.sqlite'}"},
                                    "jobs-config": {"url": f"sqlite:///{tmp_path / 'a.sqlite'}"},
                                },
                            }
                        ],
                    }
                ],
            },
        }
    }
    # settings already loaded go where a path goes: the runtime's settings are an output
    container = Container()
    container.config_path.override(settings_from_document(document, environ={}))
    container.packages.override(["integrations_sample.handlers"])
    _fanout, handling = container.jobs()
    assert handling.poll_delay.total_seconds() == 0.2
    container.shutdown_resources()


@pytest.mark.parametrize("part", ["jobs_pool", "jobs"])
def test_replacing_a_part_is_refused_naming_what_to_change_instead(tmp_path, part):
    # The parts are read from the runtime, which builds its own: a replaced pool would have sat
    # beside the one the jobs use, so the container refuses to build rather than ignore it.
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    container = configured(Container(), config, ["integrations_sample.jobs"])
    getattr(container, part).override(providers.Object(object()))
    try:
        with pytest.raises(TypeError, match=rf"EkbatanContainer\.{part} was replaced.*: \w"):
            container.init_resources()
    finally:
        container.shutdown_resources()


def _wallets(url: str) -> list[uuid.UUID]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return list(connection.execute(sa.select(Wallet.id)).scalars())
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["override", "redefine"])
def test_a_registry_of_the_application_is_the_one_the_jobs_use_and_stays_open(tmp_path, how):
    # The settings' file and the registry's lead to two SQLite files: the top-up job's deposits
    # land in the registry's, so the jobs ran with it and not with one built from the settings.
    (ekbatans, mine) = (tmp_path / "ekbatan", tmp_path / "mine")
    ekbatans.mkdir()
    mine.mkdir()
    ekbatans_url = sqlite_with_wallets(ekbatans)
    config = application_yml(ekbatans, ekbatans_url)
    my_url = sqlite_with_wallets(mine)
    my_settings = load(str(application_yml(mine, my_url)))
    migrate(my_settings)  # the eventlog tables the deposits write to
    registry = DatabaseRegistry.from_config(my_settings)
    try:
        if how == "override":
            container = configured(Container(), config, ["integrations_sample.jobs"])
            container.database_registry.override(providers.Object(registry))
        else:

            class Owning(Container):
                database_registry = providers.Object(registry)

            container = configured(Owning(), config, ["integrations_sample.jobs"])
        container.migrate_on_start.override(True)  # scheduled_tasks, in the settings' jobs pool
        container.init_resources()
        try:
            assert container.runtime().database_registry is registry
            assert container.database_registry() is registry
            wait_until(lambda: TOP_UP_WALLET in _wallets(my_url), timeout=20, message="a top-up")
            assert _wallets(ekbatans_url) == []
        finally:
            container.shutdown_resources()
        assert not registry.primary().closed, "Ekbatan closed the application's registry"
        with registry.transaction() as connection:  # and it still works
            assert connection.execute(sa.select(sa.func.count()).select_from(Wallet)).scalar() == 1
    finally:
        registry.close()


@pytest.mark.parametrize("how", ["override", "redefine"])
def test_settings_of_the_application_are_the_ones_the_runtime_is_built_with(tmp_path, how):
    (files, mine) = (tmp_path / "file", tmp_path / "mine")
    files.mkdir()
    mine.mkdir()
    config = application_yml(files, f"sqlite:///{files / 'app.sqlite'}", extra={"namespace": "from_file"})
    my_url = f"sqlite:///{mine / 'app.sqlite'}"
    my_settings = load(str(application_yml(mine, my_url, extra={"namespace": "mine"})))
    if how == "override":
        container = configured(Container(), config, ["integrations_sample.jobs"])
        container.settings.override(providers.Object(my_settings))
    else:

        class Configured(Container):
            settings = providers.Object(my_settings)

        container = configured(Configured(), config, ["integrations_sample.jobs"])
    try:
        runtime = container.runtime()
        assert runtime.settings is my_settings
        assert container.action_executor().namespace == "mine"
        assert str(container.database_registry().primary().engine.url) == my_url
    finally:
        container.shutdown_resources()


def test_init_starts_everything_and_shutdown_drains_before_closing(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    container = configured(Container(), config, ["integrations_sample"])
    container.migrate_on_start.override(True)
    Base.metadata.create_all(sa.create_engine(app_db.url, poolclass=sa.NullPool))
    container.init_resources()
    try:
        registry = container.job_registry()
        assert isinstance(registry, JobRegistry)
        assert set(registry.job_names) == {"wallet-top-up", "ekbatan-event-fanout", "ekbatan-event-handling"}
        assert isinstance(container.scheduler_client(), SchedulerClient)
        wallet = uuid.uuid4()
        container.action_executor().execute(Deposit(), DepositParams(wallet_id=wallet, amount=Decimal(7)))
        ledger = container.ledger()
        wait_until(lambda: (str(wallet), Decimal(7)) in ledger.deposits, timeout=20, message="handled")
    finally:
        container.shutdown_resources()
    engine = sa.create_engine(app_db.url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            picked = connection.exec_driver_sql(
                "SELECT COUNT(*) FROM scheduled_tasks WHERE picked = TRUE"
            ).scalar()
    finally:
        engine.dispose()
    assert picked == 0


@pytest.mark.dialects("sqlite", "postgres")
def test_shutdown_stops_the_jobs_before_closing_the_pools_they_use(app_db, tmp_path, monkeypatch):
    # Closed first, the shard pools were disposed under the running pipeline jobs, whose next
    # connections came from fresh pools that nobody closed: psycopg then warned, at garbage
    # collection, that a connection "was deleted while still open".
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    container = configured(Container(), config, ["integrations_sample"])
    container.migrate_on_start.override(True)
    Base.metadata.create_all(sa.create_engine(app_db.url, poolclass=sa.NullPool))
    container.init_resources()
    pools = [container.database_registry().primary(), container.jobs_pool()]
    open_when_stopping: list[list[bool]] = []
    real_stop = JobRegistry.stop

    def stop(registry: JobRegistry) -> None:
        open_when_stopping.append([not pool.closed for pool in pools])
        real_stop(registry)

    monkeypatch.setattr(JobRegistry, "stop", stop)
    container.shutdown_resources()
    assert open_when_stopping == [[True, True]], "a pool the jobs use was closed before they stopped"
    assert all(pool.closed for pool in pools)


class Standalone(containers.DeclarativeContainer):
    """An application container that does not extend Ekbatan's."""

    ledger = providers.Singleton(DepositLedger)


def test_a_separate_application_container_supplies_constructor_parameters(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", handling=False)
    app = Standalone()
    container = configured(EkbatanContainer(), config, ["integrations_sample.handlers"])
    container.application.override(app)
    (handler,) = container.event_handlers()
    assert handler.ledger is app.ledger()
    container.shutdown_resources()
