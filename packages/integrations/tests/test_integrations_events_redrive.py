"""Re-driving event notifications on every shard of an application (two databases): with
``ekbatan events redrive HANDLER [--failed] [--expired]``, and with the operator view's
``redrive`` action on an ``EkbatanRuntime`` (refused on a bare client). That a re-driven row is
really delivered again is shown with the handling job in the local event handler's tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from integrations_support import AppDatabase, app_database, as_json, ekbatan, notification_row
from markupsafe import escape
from starlette.testclient import TestClient
from test_integrations_operator_actions import Forms

from ekbatan.distributed_jobs.scheduler import SchedulerClient, Tasks
from ekbatan.integrations import build_runtime
from ekbatan.integrations.operator import operator_app
from ekbatan.local_event_handler import notifications_table

REPORTS = Tasks.one_time("reports").execute(lambda instance, ctx: None)
#: per shard: (handler, state) of each notification written
ROWS = [("mail", "FAILED"), ("mail", "EXPIRED"), ("mail", "SUCCEEDED"), ("audit", "FAILED")]


def two_shard_yml(directory: Path, databases: list[AppDatabase]) -> str:
    members = [
        {
            "member": index,
            "eventlog-schema": database.eventlog,
            "configs": {
                "primary-config": {"url": database.url, "maximum-pool-size": 4},
                **({"jobs-config": {"url": database.url, "maximum-pool-size": 2}} if index == 0 else {}),
            },
        }
        for index, database in enumerate(databases)
    ]
    document = {
        "ekbatan": {
            "namespace": "wallet",
            "sharding": {
                "default-shard": {"group": 0, "member": 0},
                "groups": [{"group": 0, "name": "global", "members": members}],
            },
        }
    }
    path = directory / "application.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    return str(path)


class Shards:
    def __init__(self, databases: list[AppDatabase], config: str) -> None:
        self.databases = databases
        self.config = config

    def seed(self) -> None:
        old = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
        for database in self.databases:
            engine = sa.create_engine(database.url)
            table = notifications_table(engine.dialect.name, database.eventlog)
            try:
                with engine.begin() as connection:
                    connection.execute(
                        table.insert(),
                        [
                            notification_row(
                                handler,
                                state,
                                event_date=old,
                                at=old,
                                attempts=4,
                                next_retry_at=old + timedelta(days=1),
                            )
                            for handler, state in ROWS
                        ],
                    )
            finally:
                engine.dispose()

    def states(self) -> list[list[tuple[str, str, int]]]:
        """Per shard, (handler, state, attempts) of each row in ``ROWS``' order."""
        found = []
        for database in self.databases:
            engine = sa.create_engine(database.url)
            table = notifications_table(engine.dialect.name, database.eventlog)
            try:
                with engine.connect() as connection:
                    rows = connection.execute(sa.select(table)).all()
            finally:
                engine.dispose()
            found.append(sorted((r.handler_name, r.state, r.attempts) for r in rows))
        return found


@pytest.fixture
def shards(dialect: str, tmp_path: Path) -> Iterator[Shards]:
    with ExitStack() as stack:
        databases = [stack.enter_context(app_database(dialect)) for _ in range(2)]
        config = two_shard_yml(tmp_path, databases)
        ekbatan("migrate", "--config", config)
        created = Shards(databases, config)
        created.seed()
        yield created


def rows(shards: Shards) -> list[list[tuple[str, str, int]]]:
    return shards.states()


def token_of(web: TestClient, client: SchedulerClient) -> str:
    """This browser's CSRF token, from a form of the overview (an execution gives it one)."""
    client.schedule_if_not_exists(REPORTS.instance("weekly"), datetime.now(UTC) + timedelta(days=1))
    _, form = Forms(web.get("/").text).find("pause-task", task="reports")
    return form["csrf_token"]


FRESH = [("audit", "FAILED", 4), ("mail", "EXPIRED", 4), ("mail", "FAILED", 4), ("mail", "SUCCEEDED", 4)]


@pytest.mark.dialects("sqlite", "postgres", "mariadb")
def test_the_cli_redrives_a_handler_on_every_shard(shards: Shards):
    out = as_json("events", "redrive", "mail", "--expired", "--config", shards.config)
    assert out["redriven"] == 2 and out["states"] == ["EXPIRED"]
    assert [s["redriven"] for s in out["shards"]] == [1, 1]
    after_expired = [
        ("audit", "FAILED", 4),
        ("mail", "FAILED", 4),
        ("mail", "PENDING", 0),
        ("mail", "SUCCEEDED", 4),
    ]
    assert rows(shards) == [after_expired] * 2

    people = ekbatan("events", "redrive", "mail", "--config", shards.config).stdout
    assert "2 FAILED or EXPIRED notification(s) of handler mail back to PENDING" in people
    assert rows(shards) == [[("audit", "FAILED", 4), ("mail", "PENDING", 0), ("mail", "PENDING", 0),
                             ("mail", "SUCCEEDED", 4)]] * 2  # fmt: skip

    nothing = ekbatan("events", "redrive", "mail", "--failed", "--config", shards.config).stdout
    assert "no FAILED notification of handler mail on any shard: nothing changed" in nothing
    limited = as_json("events", "redrive", "audit", "--failed", "--limit", "1", "--config", shards.config)
    assert limited["redriven"] == 1 and [s["redriven"] for s in limited["shards"]] == [1]


@pytest.mark.dialects("sqlite", "postgres")
def test_the_operator_action_redrives_on_every_shard_of_a_runtime(shards: Shards):
    runtime = build_runtime(shards.config)
    try:
        with TestClient(operator_app(runtime, read_only=False), follow_redirects=False) as web:
            csrf = {"csrf_token": token_of(web, runtime.scheduler_client), "back": "/"}
            # the pipeline panel (one table per shard) offers a button per handler and state held
            offered = [(a, f) for a, f in Forms(web.get("/").text).forms if a.endswith("/actions/redrive")]
            buttons = sorted((f["handler"], f["states"]) for _, f in offered)
            assert buttons == sorted([("audit", "FAILED"), ("mail", "FAILED"), ("mail", "EXPIRED")] * 2)
            address, button = next(
                (a, f) for a, f in offered if (f["handler"], f["states"]) == ("mail", "FAILED")
            )
            asked = web.post(address, data=button)
            assert asked.status_code == 200
            assert "Send the FAILED notifications of handler mail back to PENDING" in asked.text
            assert rows(shards) == [FRESH] * 2  # asked only
            confirm_address, confirm = Forms(asked.text).find("redrive")
            assert (confirm["handler"], confirm["states"]) == ("mail", "FAILED")
            answer = web.post(confirm_address, data=confirm)
            assert answer.status_code == 303, answer.text
            shown = web.get(answer.headers["location"]).text
            assert "2 FAILED notification(s) of handler mail back to PENDING" in shown
            assert rows(shards) == [[("audit", "FAILED", 4), ("mail", "EXPIRED", 4), ("mail", "PENDING", 0),
                                     ("mail", "SUCCEEDED", 4)]] * 2  # fmt: skip

            for bad, said in (
                ({"states": "SUCCEEDED"}, "only FAILED and EXPIRED"),
                ({"handler": " "}, "No handler given"),
            ):
                refused = web.post(
                    "/actions/redrive", data={**csrf, "handler": "mail", **bad, "confirm": "yes"}
                )
                assert refused.status_code == 400 and str(escape(said)) in refused.text
            everything = web.post("/actions/redrive", data={**csrf, "handler": "mail", "confirm": "yes"})
            assert "2 FAILED or EXPIRED notification(s)" in web.get(everything.headers["location"]).text
    finally:
        runtime.stop()


@pytest.mark.dialects("sqlite")
def test_the_redrive_action_is_refused_on_a_bare_client_and_authorized_as_retry(shards: Shards):
    engine = sa.create_engine(shards.databases[0].url)
    asked: list[str] = []

    def authorize(request: Any, kind: str) -> bool:
        asked.append(kind)
        return kind != "retry"

    try:
        client = SchedulerClient(engine)
        with TestClient(operator_app(client, read_only=False), follow_redirects=False) as web:
            data = {"csrf_token": token_of(web, client), "handler": "mail", "back": "/"}
            for confirmed in ({}, {"confirm": "yes"}):
                refused = web.post("/actions/redrive", data={**data, **confirmed})
                assert refused.status_code == 400 and "needs the application" in refused.text
        with TestClient(operator_app(client, read_only=False, authorize=authorize)) as web:
            token = token_of(web, client)
            asked.clear()
            refused = web.post("/actions/redrive", data={"csrf_token": token, "handler": "mail"})
            assert refused.status_code == 403 and asked == ["retry"]
    finally:
        engine.dispose()
    assert rows(shards) == [FRESH] * 2
