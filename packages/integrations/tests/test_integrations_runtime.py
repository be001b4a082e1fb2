"""build_runtime(): the whole product from application.yml and packages, started and stopped."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from dependency_injector import containers, providers
from integrations_sample.domain import Base, Deposit, DepositParams
from integrations_sample.handlers import DepositLedger
from integrations_support import application_yml

from ekbatan.core import JobsPoolNotConfiguredError, SettingsError
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules
from ekbatan.integrations.construction import ConstructionError
from ekbatan.integrations.runtime import build_runtime
from ekbatan.local_event_handler import EventFanoutJob, EventHandlingJob
from testsupport import wait_until


class AppContainer(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)


def test_no_job_and_no_handler_means_no_job_registry(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    runtime = build_runtime(config, ["integrations_sample.domain"])
    with runtime:
        assert runtime.job_registry is None and runtime.jobs == ()
        assert runtime.action_executor.namespace == "wallet"
        assert not runtime.event_handler_registry


def test_a_job_without_a_jobs_pool_fails_naming_the_key(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    with pytest.raises(JobsPoolNotConfiguredError) as raised:
        build_runtime(config, ["integrations_sample.jobs"])
    assert "ekbatan.sharding.groups[0].members[0].configs.jobs-config is not set" in str(raised.value)


def test_handlers_add_the_fanout_and_handling_only_when_enabled(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    fanout_only = build_runtime(
        application_yml(tmp_path, url, handling=False),
        ["integrations_sample.handlers"],
        container=AppContainer(),
    )
    fanout_only.stop()  # built, never started: stop() only closes the pools
    assert [type(j) for j in fanout_only.jobs] == [EventFanoutJob]
    both = build_runtime(
        application_yml(tmp_path, url, handling=True),
        ["integrations_sample.handlers"],
        container=AppContainer(),
    )
    both.stop()
    assert [type(j) for j in both.jobs] == [EventFanoutJob, EventHandlingJob]


def test_a_handler_whose_dependency_nobody_provides_fails_at_build(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    with pytest.raises(ConstructionError, match="parameter 'ledger' .*on offer: action_executor, clock"):
        build_runtime(config, ["integrations_sample"])


def test_the_whole_product_runs_from_one_file(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    container = AppContainer()
    runtime = build_runtime(config, ["integrations_sample"], container=container, migrate_on_start=True)
    Base.metadata.create_all(runtime.database_registry.primary().engine)
    ledger = container.ledger()
    with runtime:
        assert runtime.started
        wallet = uuid.uuid4()
        assert (
            runtime.action_executor.execute(Deposit(), DepositParams(wallet_id=wallet, amount=Decimal(5)))
            == 5
        )
        wait_until(
            lambda: (str(wallet), Decimal(5)) in ledger.deposits, timeout=20, message="the deposit handled"
        )
        # the recurring top-up job ran, and its deposits reached the handler too
        wait_until(lambda: any(w != str(wallet) for w, _ in ledger.deposits), timeout=20, message="a top-up")
    assert not runtime.started
    engine = sa.create_engine(app_db.url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT task_name, picked FROM scheduled_tasks").all()
            runs = connection.exec_driver_sql(
                "SELECT task_name, result FROM scheduled_tasks_history WHERE task_name = 'wallet-top-up'"
            ).all()
    finally:
        engine.dispose()
    assert sorted(rows) == [
        ("ekbatan-event-fanout", False),
        ("ekbatan-event-handling", False),
        ("ekbatan-history-prune", False),  # execution history is on through the integrations
        ("wallet-top-up", False),
    ]
    # the top-up's runs were recorded, and written before stop returned
    assert runs and set(runs) == {("wallet-top-up", "succeeded")}


def test_each_process_has_its_own_scheduler_name(tmp_path):
    import os
    import socket

    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    runtime = build_runtime(config, ["integrations_sample.jobs"])
    try:
        name = runtime.job_registry.scheduler.name
        assert (
            name.startswith(socket.gethostname()[:20])
            and name.endswith(f"-{os.getpid()}")
            and len(name) <= 50
        )
        named = build_runtime(
            config, ["integrations_sample.jobs"], customize_scheduler=lambda b: b.scheduler_name("mine")
        )
        assert named.job_registry.scheduler.name == "mine"
        named.stop()
    finally:
        runtime.stop()


class SameNameAsTopUp(DistributedJob):
    """A second class answering the discovered TopUpJob's name()."""

    def name(self) -> str:
        return "wallet-top-up"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(seconds=1))

    def execute(self, ctx: JobContext) -> None:
        return None


def test_two_jobs_with_one_name_fail_naming_both_classes(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    with pytest.raises(ValueError, match="DistributedJob names must be unique") as raised:
        build_runtime(config, ["integrations_sample.jobs"], extra_jobs=[SameNameAsTopUp()])
    assert (
        f"'wallet-top-up' is the name() of both integrations_sample.jobs.TopUpJob and {__name__}.SameNameAsTopUp"
        in str(raised.value)
    )


def test_the_missed_heartbeats_limit_comes_from_application_yml(tmp_path):
    jobs = {"heartbeat-interval": "PT2S", "missed-heartbeats-limit": 9}
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", extra={"jobs": jobs})
    runtime = build_runtime(config, ["integrations_sample.jobs"])
    try:
        scheduler = runtime.job_registry.scheduler
        assert scheduler.missed_heartbeats_limit == 9
        assert scheduler.heartbeat_interval * scheduler.missed_heartbeats_limit == timedelta(seconds=18)
    finally:
        runtime.stop()


def test_a_missed_heartbeats_limit_below_four_is_refused_at_load(tmp_path):
    config = application_yml(
        tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", extra={"jobs": {"missed-heartbeats-limit": 2}}
    )
    with pytest.raises(SettingsError) as raised:
        build_runtime(config, ["integrations_sample.jobs"])
    assert "ekbatan.jobs.missed-heartbeats-limit: must be at least 4, got 2" in str(raised.value)
