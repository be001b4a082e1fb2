"""``ekbatan.observability`` through the integrations: the keys turn the scheduler's and the event
pipeline's metrics on, FastAPI's ``metrics_router`` and Flask's ``metrics_blueprint`` serve them
in Prometheus' format (parsed here with prometheus_client's own parser), and a bad key is
refused naming itself and what to write."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from dependency_injector import containers, providers
from integrations_sample.domain import Deposit, DepositParams
from integrations_sample.handlers import DepositLedger
from integrations_support import ONE_SHARD, application_yml, sqlite_with_wallets
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ekbatan.core import SettingsError, settings_from_document
from ekbatan.integrations import build_runtime
from ekbatan.integrations.options import EkbatanOptions
from testsupport import wait_until
from testsupport.prometheus_scrape import PER_ITEM_LABELS


class AppContainer(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)


def sample_config(tmp_path: Any, **observability: Any) -> Any:
    url = sqlite_with_wallets(tmp_path)
    return application_yml(tmp_path, url, extra={"observability": observability} if observability else None)


def values(text: str, sample: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


# ---------------------------------------------------------------------- the keys
def test_everything_is_off_unless_asked():
    settings = settings_from_document({"ekbatan": {"sharding": ONE_SHARD}}, environ={})
    observability = settings.observability
    assert (observability.metrics, observability.traces, observability.enabled) == (False, False, False)
    assert (observability.prometheus, observability.metrics_port, observability.metrics_host) == (
        True,
        None,
        "127.0.0.1",
    )


def test_an_empty_section_means_its_defaults():
    settings = settings_from_document({"ekbatan": {"observability": None, "sharding": ONE_SHARD}}, environ={})
    assert settings.observability.metrics is False


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (
            "schedule-context",
            "child",
            "write link (a run's span links to the span that scheduled it), parent",
        ),
        ("action-context", "child", "write link (a handler call's span links to the span of the action"),
        ("metrics-port", 70000, "must be a TCP port from 1 to 65535 (0: any free port), got 70000"),
        ("metrics-port", "nine", "must be a TCP port number, got 'nine'; write e.g. 9464"),
        ("gauge-interval", "PT0S", "must be positive, got PT0S; write e.g. PT30S"),
        ("gauge-interval", "thirty seconds", "PT"),
        ("metrics", "perhaps", "bool"),
        ("exporter", "otlp", "unknown key; allowed here: metrics, traces, prometheus"),
    ],
)
def test_a_bad_key_is_refused_naming_it_and_what_to_write(key, value, says):
    document = {"ekbatan": {"observability": {key: value}, "sharding": ONE_SHARD}}
    with pytest.raises(SettingsError) as refused:
        settings_from_document(document, environ={})
    message = str(refused.value)
    assert f"observability.{key}" in message and says in message, message


def test_an_environment_variable_turns_the_metrics_on():
    document = {"ekbatan": {"sharding": ONE_SHARD}}
    settings = settings_from_document(document, environ={"EKBATAN_OBSERVABILITY_METRICS": "true"})
    assert settings.observability.metrics is True


# ---------------------------------------------------------------------- the runtime
def test_metrics_on_count_the_jobs_and_handlers_in_the_runtimes_registry(tmp_path):
    config = sample_config(tmp_path, metrics=True, **{"gauge-interval": "PT0.1S"})
    container = AppContainer()
    ledger = container.ledger()
    with build_runtime(
        config, ["integrations_sample"], container=container, migrate_on_start=True
    ) as runtime:
        registry = runtime.metrics_registry
        assert registry is not None
        wallet = uuid.uuid4()
        for _ in range(3):
            runtime.action_executor.execute(Deposit(), DepositParams(wallet_id=wallet, amount=Decimal(1)))

        def counted() -> str | None:
            # the top-up job deposits too: every call of the handler is in the ledger, and counted
            # just after it returns; so the two agree whenever no call is half done
            deposits = len(ledger.deposits)
            text = generate_latest(registry).decode()
            handled = values(text, "ekbatan_handler_duration_seconds_count", handler="deposit-counter")
            ran = values(text, "ekbatan_executions_total", task="wallet-top-up", result="succeeded")
            mine = [w for w, _ in ledger.deposits if w == str(wallet)]
            return (
                text if len(mine) == 3 and handled == deposits == len(ledger.deposits) and ran >= 1 else None
            )

        text = wait_until(counted, timeout=20, interval=0.02, message="every handler call counted")
        families = {f.name for f in text_string_to_metric_families(text)}
        assert {"ekbatan_executions", "ekbatan_execution_lag_seconds", "ekbatan_events_recorded"} <= families
        assert "process_cpu_seconds" in families, "the runtime's registry has the process collectors"
        assert not {
            label for f in text_string_to_metric_families(text) for s in f.samples for label in s.labels
        } & (PER_ITEM_LABELS)


def test_metrics_off_or_not_in_prometheus_format_leave_no_registry(tmp_path):
    off = build_runtime(sample_config(tmp_path), ["integrations_sample"], container=AppContainer())
    try:
        assert off.metrics_registry is None
    finally:
        off.stop()
    otel_only = build_runtime(
        sample_config(tmp_path, metrics=True, prometheus=False),
        ["integrations_sample"],
        container=AppContainer(),
    )
    try:
        assert otel_only.metrics_registry is None
    finally:
        otel_only.stop()


def test_the_application_may_give_its_own_registry_and_gets_it_back_clean_at_stop(tmp_path):
    mine = CollectorRegistry()
    config = sample_config(tmp_path, metrics=True)
    options = EkbatanOptions(config=config, packages=("integrations_sample",), container=AppContainer())
    for _ in range(2):  # a runtime built anew on the same registry serves its own metrics, once
        runtime = build_runtime(options=options.replace(metrics_registry=mine, migrate_on_start=True))
        with runtime:
            assert runtime.metrics_registry is mine

            def served() -> str | None:
                text = generate_latest(mine).decode()
                return text if values(text, "ekbatan_executions_total", task="wallet-top-up") else None

            text = wait_until(served, timeout=20, message="a top-up counted in the application's registry")
            names = [f.name for f in text_string_to_metric_families(text)]
            assert len(names) == len(set(names)), f"a family served twice: {sorted(names)}"
            # the scheduler's and the pipeline's, through the one collector of the runtime's
            assert {"ekbatan_executions", "ekbatan_notifications", "ekbatan_due"} <= set(names), names
        assert not [n for n in text_string_to_metric_families(generate_latest(mine).decode())], (
            "the stopped runtime's metrics were taken off the application's registry"
        )


def test_a_registry_that_is_not_one_is_refused_naming_what_to_pass():
    with pytest.raises(TypeError, match=r"metrics_registry takes a prometheus_client CollectorRegistry"):
        EkbatanOptions(metrics_registry="REGISTRY")


# ---------------------------------------------------------------------- FastAPI
def test_fastapi_metrics_router_serves_the_metrics_and_says_why_when_off(tmp_path):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from ekbatan.integrations.fastapi import ekbatan_lifespan, metrics_router

    for observability, expected in (({"metrics": True}, 200), ({}, 404)):
        directory = tmp_path / str(expected)
        directory.mkdir()
        config = sample_config(directory, **observability)
        app = FastAPI(
            lifespan=ekbatan_lifespan(config, ["integrations_sample"], AppContainer(), migrate_on_start=True)
        )
        app.include_router(metrics_router())
        with TestClient(app) as client:
            if expected == 404:
                answer = client.get("/metrics")
                assert answer.status_code == 404
                assert "set ekbatan.observability.metrics: true" in answer.text
                continue

            def scraped() -> Any:
                answer = client.get("/metrics")
                assert answer.status_code == 200, answer.text
                assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
                return (
                    answer if values(answer.text, "ekbatan_executions_total", task="wallet-top-up") else None
                )

            wait_until(scraped, timeout=20, message="a top-up counted at /metrics")
            openmetrics = client.get(
                "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            )
            assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
            assert openmetrics.text.rstrip().endswith("# EOF")


# ---------------------------------------------------------------------- Flask
def test_flask_metrics_blueprint_serves_the_metrics_and_says_why_when_off(tmp_path):
    from flask import Flask

    from ekbatan.integrations.flask import Ekbatan

    for observability, expected in (({"metrics": True}, 200), ({}, 404)):
        directory = tmp_path / str(expected)
        directory.mkdir()
        app = Flask(f"metrics_{expected}")
        extension = Ekbatan(
            app,
            config=sample_config(directory, **observability),
            packages=["integrations_sample"],
            container=AppContainer(),
            migrate_on_start=True,
        )
        app.register_blueprint(extension.metrics_blueprint())
        try:
            client = app.test_client()
            if expected == 404:
                answer = client.get("/metrics")
                assert answer.status_code == 404
                assert "set ekbatan.observability.metrics: true" in answer.get_data(as_text=True)
                continue

            def scraped(client: Any = client) -> Any:
                answer = client.get("/metrics")
                assert answer.status_code == 200
                text = answer.get_data(as_text=True)
                return text if values(text, "ekbatan_executions_total", task="wallet-top-up") else None

            wait_until(scraped, timeout=20, message="a top-up counted at /metrics")
        finally:
            extension.stop(app)


def test_the_annotated_application_yml_of_the_configuration_page_loads():
    page = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text("utf-8")
    block = page.split("## A complete, annotated `application.yml`", 1)[1].split("```yaml\n", 1)[1]
    document = yaml.safe_load(block.split("```", 1)[0])
    settings = settings_from_document(document, environ={"APP_DB_PASSWORD": "secret"})
    observability = settings.observability
    assert (observability.metrics_port, observability.gauge_interval) == (9464, timedelta(seconds=30))
    assert (observability.metrics, observability.traces, observability.schedule_context) == (
        False,
        False,
        "link",
    )


def test_traces_on_build_an_executor_that_traces_its_actions(tmp_path, caplog):
    # no SDK tracer provider is installed in the test process: the executor says so and builds
    # nothing, which shows it was asked to trace (an SDK's provider is what the docs examples use)
    config = sample_config(tmp_path, traces=True)
    with caplog.at_level(logging.INFO, logger="ekbatan.core.outbox.tracing"):
        runtime = build_runtime(config, ["integrations_sample"], container=AppContainer())
        runtime.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "ekbatan.core.outbox.tracing"]
    assert said and "no OpenTelemetry SDK tracer provider is installed, so actions make no spans" in said[0]
    assert runtime.metrics_registry is None, "traces alone serve no metrics"
