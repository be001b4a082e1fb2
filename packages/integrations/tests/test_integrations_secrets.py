"""What operators see never carries a password or executes task data: the ``ekbatan`` command
(also with ``--debug``) against a refused login or an unreachable host, the FastAPI lifespan
and readiness endpoint, and the tasks views over a crafted pickle."""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from fastapi import FastAPI
from fastapi.testclient import TestClient
from integrations_support import application_yml

from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.distributed_jobs.scheduler._table.rows import NewExecution
from ekbatan.integrations import task_views
from ekbatan.integrations.cli import main
from ekbatan.integrations.fastapi import ekbatan_lifespan, health_router
from testsupport import wait_until

SECRET = "s3cr3t-XYZ"
# A real login refusal (MariaDB's root has no password here) and a host where nothing listens.
WRONG_PASSWORD = f"mariadb+pymysql://root:{SECRET}@127.0.0.1:3306/mysql"
UNREACHABLE = f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/app"
PASSWORD_OVERRIDES = {
    f"EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_{slot}_PASSWORD": SECRET
    for slot in ("PRIMARY_CONFIG", "JOBS_CONFIG")
}


def chain(error: BaseException | None) -> Iterator[BaseException]:
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exit_code != 0, result.output  # every case here is a failure to connect
    return result


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text, text


def cli_outputs(result: Result) -> list[str]:
    texts = [result.stdout, result.stderr]
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        texts += [repr(e) for e in chain(result.exception)]
    return texts


COMMANDS = [
    ("doctor",),
    ("doctor", "--json"),
    ("doctor", "--debug"),
    ("migrate",),
    ("migrate", "--debug"),
    ("tasks", "list"),
    ("tasks", "list", "--json"),
    ("tasks", "show", "t", "i"),
    ("events", "status"),
]


@pytest.mark.parametrize("url", [WRONG_PASSWORD, UNREACHABLE], ids=["wrong-password", "unreachable"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_cli_output_never_shows_the_password(url, command, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    by_url = run(*command, "--url", url)
    assert_no_secret(*cli_outputs(by_url))
    assert by_url.stderr or by_url.stdout, "the failure is reported"

    # The same through application.yml: the password inside the URL, and as EKBATAN_ overrides.
    config = str(application_yml(tmp_path, url))
    assert_no_secret(*cli_outputs(run(*command, "--config", config)))
    without = url.replace(f":{SECRET}@", "@")
    overridden = str(application_yml(tmp_path, without))
    assert_no_secret(*cli_outputs(run(*command, "--config", overridden, env=PASSWORD_OVERRIDES)))
    assert_no_secret(caplog.text)


def test_a_lifespan_that_cannot_log_in_fails_without_the_password(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    config = application_yml(tmp_path, WRONG_PASSWORD)
    app = FastAPI(lifespan=ekbatan_lifespan(config, ["integrations_sample.jobs"]))
    app.include_router(health_router())
    with pytest.raises(Exception) as raised, TestClient(app):
        pass
    assert_no_secret(*(repr(e) for e in chain(raised.value)), *(str(e) for e in chain(raised.value)))
    assert_no_secret(caplog.text)


@pytest.mark.dialects("postgres")
def test_the_health_endpoint_never_shows_the_password(app_db, tmp_path, caplog, dialect):
    # PostgreSQL here trusts local logins, so a password in the URL is accepted and in use.
    caplog.set_level(logging.DEBUG)
    url = app_db.url.replace("postgres@", f"postgres:{SECRET}@", 1)
    assert SECRET in url
    config = application_yml(tmp_path, url, eventlog=app_db.eventlog)
    app = FastAPI(lifespan=ekbatan_lifespan(config, ["integrations_sample.jobs"], migrate_on_start=True))
    app.include_router(health_router())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/health/ekbatan").status_code == 200, 10, message="ready")
        bodies = [client.get("/health/ekbatan").text]
        # Reading scheduled_tasks fails: the reason names the error's type, not its text.
        runtime = app.state.ekbatan
        with runtime.database_registry.primary().begin() as connection:
            connection.exec_driver_sql("ALTER TABLE scheduled_tasks RENAME TO scheduled_tasks_away")
        try:
            broken = wait_until(
                lambda: (r := client.get("/health/ekbatan")).status_code == 503 and r, 10, message="unready"
            )
            bodies.append(broken.text)
            assert "could not be read" in broken.json()["reason"]
        finally:
            with runtime.database_registry.primary().begin() as connection:
                connection.exec_driver_sql("ALTER TABLE scheduled_tasks_away RENAME TO scheduled_tasks")
        bodies += [repr(runtime), str(runtime), repr(runtime.job_registry), repr(runtime.scheduler_client)]
    assert_no_secret(*bodies, caplog.text)


# ------------------------------------------------------------------ crafted pickle
class CreatesMarker:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_the_tasks_views_never_unpickle_task_data(app_db, tmp_path, dialect):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(CreatesMarker(marker))
    config = str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))
    CliRunner().invoke(main, ["migrate", "--config", config], catch_exceptions=False)
    engine = sa.create_engine(app_db.url)
    client = SchedulerClient.create(engine)
    try:
        when = datetime.now(UTC) - timedelta(minutes=1)
        assert client.repository.create_if_not_exists(NewExecution("mail", "b", when, payload))

        for args in (
            ("tasks", "list"),
            ("tasks", "list", "--json"),
            ("tasks", "show", "mail", "b"),
            ("tasks", "show", "mail", "b", "--json"),
        ):
            result = CliRunner().invoke(main, [*args, "--config", config], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert payload[:16].hex() in result.stdout
        view = task_views.get_task(client, "mail", "b")
        assert view.as_dict(full_data=True)["data_hex"] == payload.hex()
        assert [v.instance_id for v in task_views.list_tasks(client)[0]] == ["b"]
        assert not marker.exists()

        pickle.loads(payload)  # the control: the payload is live
        assert marker.exists()
    finally:
        engine.dispose()
