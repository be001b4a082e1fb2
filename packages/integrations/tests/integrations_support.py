"""Writing an ``application.yml`` for the integration tests, on any dialect's isolated database,
and running the ``ekbatan`` command in process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import yaml
from click.testing import CliRunner, Result

from testsupport import create_isolated_database, wait_until
from testsupport.eventlog_shards import drop_eventlog
from testsupport.private_servers import free_port

#: ``ekbatan.sharding`` of one SQLite shard, for settings that are built and never connected
ONE_SHARD = {
    "default-shard": {"group": 0, "member": 0},
    "groups": [
        {
            "group": 0,
            "name": "global",
            "members": [{"member": 0, "configs": {"primary-config": {"url": "sqlite:///unused.sqlite"}}}],
        }
    ],
}


def application_yml(
    directory: Path,
    url: str,
    *,
    eventlog: str = "eventlog",
    jobs_pool: bool = True,
    handling: bool = True,
    extra: dict[str, Any] | None = None,
) -> Path:
    configs: dict[str, Any] = {"primary-config": {"url": url, "maximum-pool-size": 8}}
    if jobs_pool:
        configs["jobs-config"] = {"url": url, "maximum-pool-size": 4}
    document: dict[str, Any] = {
        "ekbatan": {
            "namespace": "wallet",
            "jobs": {"polling-interval": "PT0.1S", "heartbeat-interval": "PT1S", "shutdown-max-wait": "PT5S"},
            "local-event-handler": {
                "fanout-poll-delay": "PT0.1S",
                "handling-poll-delay": "PT0.1S",
                "handling": {"enabled": handling},
            },
            "sharding": {
                "default-shard": {"group": 0, "member": 0},
                "groups": [
                    {
                        "group": 0,
                        "name": "global",
                        "members": [{"member": 0, "eventlog-schema": eventlog, "configs": configs}],
                    }
                ],
            },
        }
    }
    for key, value in (extra or {}).items():
        document["ekbatan"][key] = value
    path = directory / "application.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), "utf-8")
    return path


@dataclass
class AppDatabase:
    """An isolated database for one application, with an eventlog of its own name."""

    dialect: str
    url: str
    eventlog: str


@contextmanager
def app_database(dialect: str) -> Iterator[AppDatabase]:
    database = create_isolated_database(dialect, scope="schema", prefix="app")
    eventlog = f"el_{uuid.uuid4().hex[:10]}"
    try:
        yield AppDatabase(dialect, database.url, eventlog)
    finally:
        database.drop()
        drop_eventlog(dialect, eventlog)


def sqlite_with_wallets(directory: Path) -> str:
    """The URL of a SQLite file holding the sample's tables, so its recurring top-up job
    succeeds and only the jobs a test makes fail count as failing."""
    from integrations_sample.domain import Base

    url = f"sqlite:///{directory / 'app.sqlite'}"
    engine = sa.create_engine(url)
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()
    return url


def ekbatan(*args: str, code: int = 0) -> Result:
    """``ekbatan ARGS`` in process; its exit code must be ``code``."""
    from ekbatan.integrations.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == code, (result.exit_code, result.output)
    return result


def as_json(*args: str, code: int = 0) -> Any:
    """``ekbatan ARGS --json``, parsed."""
    return json.loads(ekbatan(*args, "--json", code=code).stdout)


def notification_row(
    handler: str,
    state: str,
    *,
    event_date: datetime,
    at: datetime,
    attempts: int = 1,
    event_type: str = "MoneyDeposited",
    **columns: Any,
) -> dict[str, Any]:
    """One ``event_notifications`` row as the fan-out writes it (the event's columns copied),
    for tests that need notifications in given states without running the pipeline; ``at``
    stands for every timestamp but the event's own, ``columns`` override any column."""
    return {
        "id": uuid.uuid4(),
        "event_id": uuid.uuid4(),
        "action_id": uuid.uuid4(),
        "namespace": "wallet",
        "action_name": "Deposit",
        "action_params": {},
        "started_date": at,
        "completion_date": at,
        "payload": {},
        "event_type": event_type,
        "event_date": event_date,
        "handler_name": handler,
        "state": state,
        "attempts": attempts,
        "next_retry_at": at,
        "created_date": at,
        "updated_date": at,
        **columns,
    }


@dataclass
class Served:
    base: str
    process: subprocess.Popen[str]
    #: what it printed, once stopped
    stderr: str = ""


def _answering(served: Served) -> bool:
    assert served.process.poll() is None, served.process.communicate()
    try:
        httpx.get(served.base + "/static/operator.css", timeout=1)
    except httpx.TransportError:
        return False
    return True


@contextmanager
def ekbatan_ui(cwd: Path, config: str, *flags: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``ekbatan ui --config CONFIG FLAGS`` as a process serving until the block ends (once it
    answers); its stderr is on the yielded object afterwards. No basic auth nor CSRF secret from
    the outer shell: ``env`` sets what a test wants."""
    port = free_port()
    quiet = {"EKBATAN_UI_USER": "", "EKBATAN_UI_PASSWORD": "", "EKBATAN_UI_SECRET": ""}
    command = [sys.executable, "-m", "ekbatan.integrations.cli", "ui", "--config", config]
    process = subprocess.Popen(
        [*command, "--port", str(port), *flags],
        cwd=cwd,
        env={**os.environ, **quiet, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(f"http://127.0.0.1:{port}", process)
    try:
        wait_until(lambda: _answering(served), timeout=60, message="ekbatan ui answers")
        yield served
    finally:
        process.terminate()
        try:
            served.stderr = process.communicate(timeout=15)[1]
        except subprocess.TimeoutExpired:
            process.kill()
            served.stderr = process.communicate()[1]
