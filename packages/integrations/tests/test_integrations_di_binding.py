"""EkbatanContainer reading application.yml: camel, kebab and mixed keys of the local event
handler reach the jobs; EKBATAN_… environment variables reach the container; option providers
a subclass redefines are the ones the runtime is built with, and a part it redefines is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from dependency_injector import providers
from integrations_sample.handlers import DepositLedger
from integrations_support import application_yml

from ekbatan.core import ConnectionProvider, DatabaseRegistry
from ekbatan.integrations.di import EkbatanContainer
from ekbatan.local_event_handler import EventFanoutJob, EventHandlingJob

KEBAB = {
    "fanout-poll-delay": "PT0.3S",
    "fanout-batch-size": 77,
    "handling-poll-delay": "PT0.4S",
    "handling-batch-size": 55,
    "handling-max-backoff-cap": "PT2M",
    "handling-retention-window": "P2D",
    "handling-handler-timeout": "PT9S",
    "handling": {"enabled": True},
}
CAMEL = {
    "fanoutPollDelay": "PT0.3S",
    "fanoutBatchSize": 77,
    "handlingPollDelay": "PT0.4S",
    "handlingBatchSize": 55,
    "handlingMaxBackoffCap": "PT2M",
    "handlingRetentionWindow": "P2D",
    "handlingHandlerTimeout": "PT9S",
    "handling": {"enabled": True},
}
MIXED = {
    "fanout-poll-delay": "PT0.3S",
    "fanoutBatchSize": 77,
    "handling_poll_delay": "PT0.4S",
    "handlingBatchSize": 55,
    "handling-max-backoff-cap": "PT2M",
    "handlingRetentionWindow": "P2D",
    "handling_handler_timeout": "PT9S",
    "handling": {"enabled": True},
}


class Container(EkbatanContainer):
    ledger = providers.Singleton(DepositLedger)


def _config_with(tmp_path, section_key: str, section: dict) -> str:
    path = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    document = yaml.safe_load(path.read_text("utf-8"))
    del document["ekbatan"]["local-event-handler"]
    document["ekbatan"][section_key] = section
    path.write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("section_key", "section"),
    [("local-event-handler", KEBAB), ("localEventHandler", CAMEL), ("local_event_handler", MIXED)],
    ids=["kebab", "camel", "mixed"],
)
def test_every_local_event_handler_key_reaches_the_jobs_in_any_spelling(tmp_path, section_key, section):
    container = Container(config_path=_config_with(tmp_path, section_key, section))
    container.packages.override(["integrations_sample.handlers"])
    try:
        fanout, handling = container.jobs()
        assert isinstance(fanout, EventFanoutJob) and isinstance(handling, EventHandlingJob)
        assert (fanout.poll_delay, fanout.batch_size) == (timedelta(seconds=0.3), 77)
        assert (handling.poll_delay, handling.batch_size) == (timedelta(seconds=0.4), 55)
        assert handling.max_backoff_cap == timedelta(minutes=2)
        assert handling.retention_window == timedelta(days=2)
        assert handling.handler_timeout == timedelta(seconds=9)
    finally:
        container.shutdown_resources()


def test_environment_variables_override_the_file_in_the_container(tmp_path, monkeypatch):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", handling=False)
    monkeypatch.setenv("EKBATAN_NAMESPACE", "from_env")
    monkeypatch.setenv("EKBATAN_LOCAL_EVENT_HANDLER_HANDLING_ENABLED", "true")
    monkeypatch.setenv("EKBATAN_LOCALEVENTHANDLER_FANOUTBATCHSIZE", "31")
    monkeypatch.setenv("EKBATAN_JOBS_POLLING_INTERVAL", "PT0.7S")
    container = Container(config_path=str(config), packages=["integrations_sample"], migrate_on_start=True)
    container.init_resources()
    try:
        assert container.settings().namespace == "from_env"
        assert container.action_executor().namespace == "from_env"
        fanout, handling = container.jobs()[-2:]
        assert isinstance(handling, EventHandlingJob)  # the file says enabled: false
        assert fanout.batch_size == 31
        assert container.job_registry().scheduler.polling_interval == timedelta(seconds=0.7)
    finally:
        container.shutdown_resources()


class Redefining(EkbatanContainer):
    """An application that sets its configuration by redefining Ekbatan's providers."""

    packages = providers.Object(["integrations_sample"])
    migrate_on_start = providers.Object(True)
    ledger = providers.Singleton(DepositLedger)
    # the application's own service built on Ekbatan's registry: one registry for both
    registry_user = providers.Singleton(lambda registry: registry, EkbatanContainer.database_registry)


def test_providers_a_subclass_redefines_are_the_ones_ekbatan_uses(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")

    class WithConfig(Redefining):
        config_path = providers.Object(str(config))

    container = WithConfig()
    container.init_resources()
    try:
        assert container.discovered().modules[0] == "integrations_sample"
        assert set(container.job_registry().job_names) == {
            "wallet-top-up",
            "ekbatan-event-fanout",
            "ekbatan-event-handling",
        }
        assert container.migrations() is True
        assert container.registry_user() is container.database_registry()
        assert isinstance(container.database_registry(), DatabaseRegistry)
    finally:
        container.shutdown_resources()


def test_a_redefined_jobs_pool_is_refused_and_the_base_class_left_as_it_was(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    config = application_yml(tmp_path, url, jobs_pool=False)
    opened = []

    def my_pool():
        pool = ConnectionProvider.from_url(url, maximum_pool_size=2)
        opened.append(pool)
        yield pool
        pool.close()

    class OwnPool(Redefining):
        config_path = providers.Object(str(config))
        jobs_pool = providers.Resource(my_pool)

    container = OwnPool()
    try:
        with pytest.raises(TypeError, match=r"jobs_pool was replaced.*jobs-config in the settings"):
            container.runtime()
    finally:
        container.shutdown_resources()
    assert opened == []  # refused before anything was opened
    assert EkbatanContainer.providers["jobs_pool"] is not OwnPool.providers["jobs_pool"]
