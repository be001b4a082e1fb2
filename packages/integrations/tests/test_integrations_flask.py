"""The Flask extension: built from app.config, started by the serving process only, and its CLI."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal

import click
import integrations_sample.domain
import pytest
import sqlalchemy as sa
from dependency_injector import containers, providers
from flask import Flask, current_app, request
from integrations_beacon import Beacon, three_threads
from integrations_sample.domain import Base, Deposit, DepositParams
from integrations_sample.handlers import DepositLedger
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import JobsPoolNotConfiguredError, SettingsError, load_settings, migrate
from ekbatan.integrations.flask import Ekbatan
from ekbatan.integrations.options import EkbatanOptions
from testsupport import wait_until

EVERYTHING = "integrations_sample.domain, integrations_sample.handlers, integrations_sample.jobs"


class AppContainer(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)


def wallet_app(
    config, packages=EVERYTHING, container=None, name="wallet_service", **app_config
) -> tuple[Flask, Ekbatan]:
    """The application factory of a small wallet service."""
    app = Flask(name)
    app.config.update(EKBATAN_CONFIG=str(config), EKBATAN_PACKAGES=packages, **app_config)
    ekbatan = Ekbatan(container=container)
    ekbatan.init_app(app)

    @app.post("/wallets/<wallet>/deposits")
    def deposit(wallet: str) -> dict[str, str]:
        executor = current_app.extensions["ekbatan"].action_executor
        params = DepositParams(wallet_id=uuid.UUID(wallet), amount=Decimal(request.get_json()["amount"]))
        return {"balance": str(executor.execute(Deposit(), params))}

    return app, ekbatan


def scheduled_rows(url: str) -> list[tuple[str, bool]]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return sorted(
                (name, bool(picked))
                for name, picked in connection.exec_driver_sql(
                    "SELECT task_name, picked FROM scheduled_tasks"
                )
            )
    finally:
        engine.dispose()


@pytest.mark.dialects("sqlite", "postgres")
def test_a_view_executes_an_action_the_handler_sees_it_and_stop_leaves_nothing_picked(app_db, tmp_path):
    container = AppContainer()
    app, ekbatan = wallet_app(
        application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog), container=container
    )
    try:
        assert app.extensions["ekbatan"] is ekbatan
        assert ekbatan.settings.namespace == "wallet"
        migrated = app.test_cli_runner().invoke(args=["ekbatan", "migrate"])
        assert migrated.exit_code == 0, migrated.output
        # ekbatan migrate's own table: one row per migration and shard, then a summary
        lines = migrated.output.splitlines()
        assert lines[0].split() == ["SHARD", "DIALECT", "MIGRATION", "STATUS", "DESCRIPTION"], migrated.output
        rows = {" ".join(line.split()[2:4]): line.split()[4] for line in lines if line.startswith("global/")}
        assert set(rows) == {
            "event_notifications 1",
            "outbox 1",
            "scheduled_tasks 0001",
            "scheduled_tasks 0002",
            "scheduled_tasks 0003",
            "scheduled_tasks 0004",
        }, migrated.output
        assert (
            rows["outbox 1"] == rows["event_notifications 1"] == rows["scheduled_tasks 0001"] == "applied"
        ), migrated.output
        assert lines[-1].endswith("applied on 1 shard(s)"), migrated.output
        again = app.test_cli_runner().invoke(args=["ekbatan", "migrate"])
        assert again.output.splitlines()[-1] == "0 migration(s) applied on 1 shard(s)", again.output
        assert "already applied" in again.output, again.output
        assert not ekbatan.started(app), "CLI commands do not start the job registry"

        with app.app_context():
            Base.metadata.create_all(ekbatan.database_registry.primary().engine)
        assert not ekbatan.started(app), "building the graph does not start it; a request does"

        wallet = uuid.uuid4()
        response = app.test_client().post(f"/wallets/{wallet}/deposits", json={"amount": "7.50"})
        assert response.status_code == 200, response.text
        assert response.get_json() == {"balance": "7.50"}
        assert ekbatan.started(app)
        ledger = container.ledger()
        wait_until(lambda: (str(wallet), Decimal("7.50")) in ledger.deposits, timeout=20, message="handled")

        listed = app.test_cli_runner().invoke(args=["ekbatan", "tasks"])
        assert listed.exit_code == 0, listed.output
        header, *lines = listed.output.splitlines()
        # ekbatan tasks list's own table
        assert header.split() == ["TASK", "INSTANCE", "DUE", "PICKED", "BY", "HEARTBEAT", "FAILURES"]
        assert lines[-1] == "4 execution(s)"
        assert sorted(line.split()[0] for line in lines[:-1]) == [
            "ekbatan-event-fanout",
            "ekbatan-event-handling",
            "ekbatan-history-prune",
            "wallet-top-up",
        ]
        assert ekbatan.started(app), "listing tasks leaves the running registry alone"
    finally:
        ekbatan.stop(app)
    assert not ekbatan.started(app)
    assert scheduled_rows(app_db.url) == [
        ("ekbatan-event-fanout", False),
        ("ekbatan-event-handling", False),
        ("ekbatan-history-prune", False),
        ("wallet-top-up", False),
    ]
    # the CLI builds what it needs and closes it again when nothing was running
    listed = app.test_cli_runner().invoke(args=["ekbatan", "tasks"])
    assert listed.exit_code == 0 and listed.output.splitlines()[-1] == "4 execution(s)", listed.output
    assert not ekbatan.started(app)


def test_only_the_reloader_child_starts_at_init_app(tmp_path, monkeypatch):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    migrate(load_settings(config))
    monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    parent, parent_ekbatan = wallet_app(config, "integrations_sample.jobs")
    assert not parent_ekbatan.started(parent), "the reloader's parent (and any process) waits"
    monkeypatch.setenv("WERKZEUG_RUN_MAIN", "true")
    child, child_ekbatan = wallet_app(config, "integrations_sample.jobs")
    try:
        assert child_ekbatan.started(child)
        assert child_ekbatan.runtime_for(child).job_registry is not None
    finally:
        child_ekbatan.stop(child)


def test_cli_commands_start_only_when_asked_and_never_the_ekbatan_ones(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    seen: dict[str, bool] = {}

    def with_probe(app: Flask, ekbatan: Ekbatan) -> Flask:
        @app.cli.command("probe")
        def probe() -> None:
            seen[app.name] = ekbatan.started()
            click.echo("probed")

        return app

    quiet, quiet_ekbatan = wallet_app(config, "integrations_sample.jobs")
    asked, asked_ekbatan = wallet_app(
        config, "integrations_sample.jobs", name="asked", EKBATAN_START_FOR_CLI=True
    )
    try:
        # on a database without the framework tables the registry cannot start: migrate must not try
        migrated = asked.test_cli_runner().invoke(args=["ekbatan", "migrate"])
        assert migrated.exit_code == 0, migrated.output
        assert not asked_ekbatan.started(asked)
        assert with_probe(quiet, quiet_ekbatan).test_cli_runner().invoke(args=["probe"]).output == "probed\n"
        assert with_probe(asked, asked_ekbatan).test_cli_runner().invoke(args=["probe"]).output == "probed\n"
        assert seen == {"wallet_service": False, "asked": True}
    finally:
        asked_ekbatan.stop(asked)
        quiet_ekbatan.stop(quiet)


def test_a_bad_config_names_the_key(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    bad = application_yml(tmp_path, url, extra={"jobs": {"polling-interval": "PT0S"}})
    with pytest.raises(SettingsError, match=r"ekbatan\.jobs\.polling-interval"):
        wallet_app(bad)
    no_jobs_pool = application_yml(tmp_path, url, jobs_pool=False)
    with pytest.raises(JobsPoolNotConfiguredError, match=r"members\[0\]\.configs\.jobs-config is not set"):
        wallet_app(no_jobs_pool, "integrations_sample.jobs")
    app = Flask("missing")
    app.config["EKBATAN_CONFIG"] = str(tmp_path / "nowhere.yml")
    with pytest.raises(SettingsError, match="nowhere.yml"):
        Ekbatan(app)


def test_no_job_and_no_handler_means_no_job_registry(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    # packages may be modules too
    app, ekbatan = wallet_app(config, [integrations_sample.domain], EKBATAN_MIGRATE_ON_START="true")
    try:
        with app.app_context():
            Base.metadata.create_all(ekbatan.database_registry.primary().engine)
        # the first request starts it: the framework tables are migrated, and no job registry starts
        response = app.test_client().post(f"/wallets/{uuid.uuid4()}/deposits", json={"amount": "3"})
        assert response.get_json() == {"balance": "3"}, response.text
        assert ekbatan.started(app)
        assert ekbatan.runtime_for(app).job_registry is None
        assert ekbatan.runtime_for(app).jobs == ()
    finally:
        ekbatan.stop(app)


def test_a_forked_child_never_uses_the_parents_pools(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    app, ekbatan = wallet_app(config, ["integrations_sample.domain"])
    try:
        parents = ekbatan.runtime_for(app)
        with parents.database_registry.primary().engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code only
            code = 1
            try:
                child = ekbatan.runtime_for(app)
                code = (
                    0
                    if child is not parents and child.database_registry is not parents.database_registry
                    else 2
                )
                ekbatan.stop(app)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ekbatan.runtime_for(app) is parents, "the parent keeps its own graph"
    finally:
        ekbatan.stop(app)


def test_init_app_twice_and_a_missing_application_are_errors(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    app, ekbatan = wallet_app(config, "")
    with pytest.raises(RuntimeError, match="already initialized"):
        Ekbatan().init_app(app)
    with pytest.raises(RuntimeError, match="init_app was never called"):
        _ = Ekbatan().action_executor
    other = Flask("other")
    other.config["EKBATAN_CONFIG"] = str(config)
    ekbatan.init_app(other)
    with pytest.raises(RuntimeError, match="serves several applications"):
        _ = ekbatan.action_executor
    with other.app_context():
        assert ekbatan.runtime is ekbatan.runtime_for(other)
    ekbatan.stop(app)
    ekbatan.stop(other)


UNREACHABLE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"


@pytest.mark.parametrize("how", ["argument", "app.config"])
def test_require_database_false_starts_degraded_instead_of_failing(tmp_path, how):
    from ekbatan.distributed_jobs import JobsDatabaseUnavailableError

    config = application_yml(tmp_path, UNREACHABLE_URL)
    strict_app, strict = wallet_app(config, container=AppContainer(), name="strict_wallet")
    try:
        with pytest.raises(JobsDatabaseUnavailableError, match=r"jobs-config.*127\.0\.0\.1:1"):
            strict.start(strict_app)
        assert not strict.started(strict_app)
    finally:
        strict.stop(strict_app)

    if how == "argument":
        app = Flask("degraded_wallet")
        app.config.update(EKBATAN_CONFIG=str(config), EKBATAN_PACKAGES=EVERYTHING)
        ekbatan = Ekbatan(container=AppContainer(), require_database=False)
        ekbatan.init_app(app)
    else:
        app, ekbatan = wallet_app(
            config, container=AppContainer(), name="degraded_wallet", EKBATAN_REQUIRE_DATABASE=False
        )
    try:
        runtime = ekbatan.start(app)
        assert ekbatan.started(app)
        assert runtime.job_registry.waiting_for_database
        assert runtime.job_registry.scheduler.startup_tasks_pending  # written once it answers
    finally:
        ekbatan.stop(app)


def test_the_health_blueprint_reports_readiness(tmp_path):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    migrate(load_settings(config))
    app, ekbatan = wallet_app(config, container=AppContainer(), name="probed_wallet", EKBATAN_AUTOSTART=False)
    app.register_blueprint(ekbatan.health_blueprint())
    app.register_blueprint(ekbatan.health_blueprint("/strict", max_failing_tasks=0, name="strict_health"))
    client = app.test_client()
    try:
        not_started = client.get("/health/ekbatan")
        assert not_started.status_code == 503
        assert not_started.get_json()["reason"] == "ekbatan is not started"

        ekbatan.start(app)

        def ready() -> bool:
            return client.get("/health/ekbatan").status_code == 200

        wait_until(ready, timeout=30, message="ready after the first successful poll")
        report = client.get("/strict").get_json()
        assert report["status"] == "ok" and report["scheduler"]["failing_tasks"] == 0
        assert report["scheduler"]["running"] is True
    finally:
        ekbatan.stop(app)
    stopped = client.get("/health/ekbatan")
    assert stopped.status_code == 503 and stopped.get_json()["status"] == "unavailable"


def test_the_health_blueprint_answers_503_while_the_database_is_missing(tmp_path):
    config = application_yml(tmp_path, UNREACHABLE_URL)
    app, ekbatan = wallet_app(
        config, container=AppContainer(), name="degraded_probe", EKBATAN_REQUIRE_DATABASE=False
    )
    app.register_blueprint(ekbatan.health_blueprint(count_failing_tasks=False))
    try:
        response = app.test_client().get("/health/ekbatan")  # the first request starts it, degraded
        assert ekbatan.started(app)
        assert response.status_code == 503
        assert "has not polled yet" in response.get_json()["reason"]
        assert "nowhere" not in response.get_data(as_text=True)  # no configuration in the report
    finally:
        ekbatan.stop(app)


@pytest.mark.parametrize("how", ["keywords", "options", "EKBATAN_OPTIONS", "EKBATAN_<FIELD>"])
def test_extra_jobs_and_customize_scheduler_reach_flask(tmp_path, how):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    migrate(load_settings(config))
    beacon = Beacon()
    app = Flask(f"beacon_{how}")
    app.config["EKBATAN_CONFIG"] = str(config)
    if how == "keywords":
        ekbatan = Ekbatan(app, extra_jobs=[beacon], customize_scheduler=three_threads)
    elif how == "options":
        ekbatan = Ekbatan(app, options=EkbatanOptions(extra_jobs=[beacon], customize_scheduler=three_threads))
    elif how == "EKBATAN_OPTIONS":
        app.config["EKBATAN_OPTIONS"] = EkbatanOptions(extra_jobs=[beacon], customize_scheduler=three_threads)
        ekbatan = Ekbatan(app)
    else:
        app.config.update(EKBATAN_EXTRA_JOBS=[beacon], EKBATAN_CUSTOMIZE_SCHEDULER=three_threads)
        ekbatan = Ekbatan(app)
    try:
        runtime = ekbatan.start(app)
        assert runtime.job_registry.job_names == ("beacon",)
        assert runtime.job_registry.scheduler.threads == 3
        wait_until(lambda: beacon.runs, timeout=20, message="the extra job ran")
    finally:
        ekbatan.stop(app)


def test_what_the_constructor_is_given_wins_over_app_config(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    beacon, other = Beacon(), Beacon()
    app = Flask("precedence")
    app.config.update(
        # EKBATAN_<FIELD> keys win over EKBATAN_OPTIONS within app.config
        EKBATAN_OPTIONS=EkbatanOptions(config="nowhere.yml", extra_jobs=[other], require_database=False),
        EKBATAN_CONFIG=str(config),
        EKBATAN_MIGRATE_ON_START="yes",
    )
    # the constructor's options win for what they set (extra_jobs), and leave the rest to app.config;
    # its keywords win over both
    ekbatan = Ekbatan(
        options=EkbatanOptions(extra_jobs=[beacon], customize_scheduler=print),
        customize_scheduler=three_threads,
    )
    ekbatan.init_app(app)
    opts = ekbatan.options_for(app)
    assert opts.config == str(config) and opts.extra_jobs == (beacon,)
    assert (opts.migrate_on_start, opts.require_database, opts.customize_scheduler) == (
        True,
        False,
        three_threads,
    )
    runtime = ekbatan.runtime_for(app)
    try:
        assert runtime.job_registry.job_names == ("beacon",)
        assert runtime.job_registry.scheduler.threads == 3
    finally:
        ekbatan.stop(app)


def test_a_bad_option_is_named(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    with pytest.raises(TypeError, match=r"unknown Ekbatan option\(s\) \['extra_job'\]"):
        Ekbatan(extra_job=[Beacon()])  # type: ignore[call-arg]
    app = Flask("bad_flag")
    app.config["EKBATAN_AUTOSTART"] = "sometimes"
    with pytest.raises(ValueError, match="EKBATAN_AUTOSTART is a flag: write true or false, not 'sometimes'"):
        Ekbatan(app, config=config)


def test_a_cli_failure_is_one_line_as_with_the_ekbatan_command(tmp_path):
    missing = tmp_path / "not-created.sqlite"
    app, _ = wallet_app(application_yml(tmp_path, f"sqlite:///{missing}"), packages=[])
    listed = app.test_cli_runner().invoke(args=["ekbatan", "tasks"])
    assert listed.exit_code != 0 and "Traceback" not in listed.stderr, listed.stderr
    assert listed.stderr.startswith("error: no SQLite database at ") and listed.stderr.count("\n") == 1, (
        listed.stderr
    )
    assert not missing.exists()  # a listing never creates the database
