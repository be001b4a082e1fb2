"""One application through the five entry points — ``build_runtime``, FastAPI's
``ekbatan_lifespan``, Flask's ``Ekbatan``, ``EkbatanContainer`` and ``ekbatan worker`` — must
give one result: the same objects built from the same options, the same work done (a job, a
one-time task with typed data, an action's event delivered to two handlers), the same error for
the same mistake, and every pool it opened closed when it stops."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from ekbatan.core import load_settings, migrate
from ekbatan.integrations import build_runtime
from ekbatan.integrations.options import EkbatanOptions
from ekbatan.integrations.runtime import EkbatanRuntime
from testsupport import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = Path(__file__).resolve().parent / "examples"

CONFIG = """\
ekbatan:
  namespace: contract
  jobs:
    polling-interval: PT0.2S
    heartbeat-interval: PT1S
    shutdown-max-wait: PT5S
  local-event-handler:
    fanout-poll-delay: PT0.1S
    handling-poll-delay: PT0.1S
    handling:
      enabled: true
  sharding:
    default-shard: {{group: 0, member: 0}}
    groups:
      - group: 0
        name: global
        members:
          - member: 0
            configs:
              primary-config:
                url: sqlite:///{database}
{jobs_config}"""
JOBS_CONFIG = """\
              jobs-config:
                url: sqlite:///{database}
"""

#: what every entry point builds from the contract shop
BUILT = {
    "actions": ["PlaceContractOrder"],
    "handlers": ["contract-ledger", "contract-mailer"],
    "jobs": ["contract-tick", "ekbatan-event-fanout", "ekbatan-event-handling"],
    "tasks": ["contract-receipt"],
}


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An application.yml on a fresh SQLite file, its tables created; the work log's path set."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("CONTRACT_SHOP_LOG", str(tmp_path / "work.log"))
    database = tmp_path / "shop.sqlite"
    config = tmp_path / "application.yml"
    config.write_text(CONFIG.format(database=database, jobs_config=JOBS_CONFIG.format(database=database)))
    migrate(load_settings(config))
    from contract_shop.shop import Base

    engine = sa.create_engine(f"sqlite:///{database}")
    Base.metadata.create_all(engine)
    engine.dispose()
    return config


def work_log() -> list[str]:
    path = Path(os.environ["CONTRACT_SHOP_LOG"])
    return path.read_text().splitlines() if path.exists() else []


# ---------------------------------------------------------------------- the entry points
def via_build_runtime(options: EkbatanOptions) -> AbstractContextManager[EkbatanRuntime]:
    return build_runtime(options=options)


@contextmanager
def via_fastapi(options: EkbatanOptions) -> Iterator[EkbatanRuntime]:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from ekbatan.integrations.fastapi import ekbatan_lifespan

    app = FastAPI(lifespan=ekbatan_lifespan(options=options))
    with TestClient(app):  # runs the lifespan: built and started on entry, stopped on exit
        yield app.state.ekbatan


@contextmanager
def via_flask(options: EkbatanOptions) -> Iterator[EkbatanRuntime]:
    from flask import Flask

    from ekbatan.integrations.flask import Ekbatan

    app = Flask("contract")
    extension = Ekbatan(app, options=options)
    runtime = extension.start(app)
    try:
        yield runtime
    finally:
        extension.stop(app)


@contextmanager
def via_container(options: EkbatanOptions) -> Iterator[EkbatanRuntime]:
    from ekbatan.integrations.di import EkbatanContainer

    container = EkbatanContainer(options=options)
    container.init_resources()
    try:
        yield container.started()
    finally:
        container.shutdown_resources()


IN_PROCESS: dict[str, Callable[[EkbatanOptions], AbstractContextManager[EkbatanRuntime]]] = {
    "build_runtime": via_build_runtime,
    "fastapi": via_fastapi,
    "flask": via_flask,
    "container": via_container,
}


def built(runtime: EkbatanRuntime) -> dict[str, list[str]]:
    return {
        "actions": sorted(cls.__name__ for cls in runtime.discovered.actions),
        "handlers": sorted(runtime.event_handler_registry.handler_names()),
        "jobs": sorted(job.name() for job in runtime.jobs),
        "tasks": sorted(task.name for task in runtime.tasks),
    }


def place_order_and_schedule_receipt(runtime: EkbatanRuntime) -> uuid.UUID:
    from contract_shop.shop import OrderParams, PlaceContractOrder, Receipt, send_receipt

    order = uuid.uuid4()
    runtime.action_executor.execute(PlaceContractOrder(), OrderParams(order_id=order, total=Decimal("19.99")))
    assert runtime.scheduler_client.schedule(send_receipt.instance(str(order), Receipt(str(order), 1999)))
    return order


def the_work_is_done(order: uuid.UUID) -> list[str]:
    expected = {"ticked", f"mailed {order}", f"booked {order}", f"receipt {order} 1999 Receipt"}
    done = set(work_log())
    return sorted(expected - done)


# ---------------------------------------------------------------------- the contract
@pytest.mark.parametrize("entry_point", sorted(IN_PROCESS))
def test_each_entry_point_builds_runs_and_closes_the_same_application(entry_point: str, shop: Path):
    options = EkbatanOptions(config=shop, packages=("contract_shop",))
    with IN_PROCESS[entry_point](options) as runtime:
        assert runtime.started
        assert built(runtime) == BUILT
        pools = [runtime.database_registry.primary(), runtime.jobs_pool]
        order = place_order_and_schedule_receipt(runtime)
        wait_until(
            lambda: not the_work_is_done(order), timeout=30, message=f"the work: {the_work_is_done(order)}"
        )
    assert not runtime.started
    assert all(pool is not None and pool.closed for pool in pools), "every pool it opened is closed"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a server or worker process: the examples and the repository importable."""
    path = os.pathsep.join([str(EXAMPLES), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **extra}


@contextmanager
def worker(config: Path, packages: str, stderr: Path) -> Iterator[subprocess.Popen[str]]:
    """``ekbatan worker --json`` as a process of its own; its stderr goes to ``stderr``."""
    env = subprocess_env()
    command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--json"]
    command += ["--config", str(config), "--packages", packages]
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            command, env=env, cwd=config.parent, stdout=subprocess.PIPE, stderr=errors, text=True
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()


@pytest.mark.slow
def test_ekbatan_worker_builds_and_runs_the_same_application(shop: Path, tmp_path: Path):
    stderr = tmp_path / "worker.err"
    with worker(shop, "contract_shop", stderr) as process:
        assert process.stdout is not None
        started = json.loads(process.stdout.readline() or "{}")
        assert started.get("event") == "started", f"{started}\n{stderr.read_text()}"
        assert {key: sorted(started[key]) for key in ("handlers", "jobs", "tasks")} == {
            key: BUILT[key] for key in ("handlers", "jobs", "tasks")
        }
        # The application's own process (a web server, say) acts and schedules; the worker works.
        client_side = build_runtime(options=EkbatanOptions(config=shop, packages=("contract_shop",)))
        try:
            order = place_order_and_schedule_receipt(client_side)
            wait_until(
                lambda: not the_work_is_done(order),
                timeout=30,
                message=f"the work: {the_work_is_done(order)}",
            )
        finally:
            client_side.stop()
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
        assert process.returncode == 0, stderr.read_text()
        stopped = json.loads(rest.strip().splitlines()[-1])
        assert stopped == {"event": "stopped", "signal": "SIGTERM", "abandoned": 0}


@contextmanager
def uvicorn(config: Path, packages: str, stderr: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The contract shop's FastAPI application under a real uvicorn, on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = subprocess_env(CONTRACT_SHOP_CONFIG=str(config), CONTRACT_SHOP_PACKAGES=packages)
    command = [sys.executable, "-m", "uvicorn", "contract_shop.web:app", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--timeout-graceful-shutdown", "10"]
    with stderr.open("w") as errors:
        process = subprocess.Popen(
            command, env=env, cwd=config.parent, stdout=errors, stderr=errors, text=True
        )
        try:
            yield process, f"http://127.0.0.1:{port}"
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()


@pytest.mark.slow
def test_fastapi_under_uvicorn_builds_and_runs_the_same_application(shop: Path, tmp_path: Path):
    stderr = tmp_path / "uvicorn.log"
    with uvicorn(shop, "contract_shop", stderr) as (process, base):

        def serving() -> bool:
            assert process.poll() is None, stderr.read_text()
            # a single uvicorn process opens its socket after the lifespan's startup, so no log
            # line of its startup says connections are taken: one taken is what says it
            try:
                httpx.get(f"{base}/built", timeout=5)
            except httpx.TransportError:
                return False
            return True

        wait_until(serving, timeout=30, message="uvicorn to start")
        with httpx.Client(base_url=base, timeout=10) as client:
            assert client.get("/built").json() == BUILT
            order = uuid.UUID(client.post("/orders").json()["order"])
        wait_until(
            lambda: not the_work_is_done(order), timeout=30, message=f"the work: {the_work_is_done(order)}"
        )
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully
        assert process.returncode in (0, -signal.SIGTERM), stderr.read_text()
        assert "Application shutdown complete." in stderr.read_text()


# ---------------------------------------------------------------------- the same mistakes
def without_jobs_config(shop: Path) -> Path:
    database = shop.parent / "shop.sqlite"
    config = shop.parent / "no-jobs-pool.yml"
    config.write_text(CONFIG.format(database=database, jobs_config=""))
    return config


MISTAKES = {
    # no jobs pool: the error names the key to set
    "no jobs pool": (without_jobs_config, "contract_shop", ["jobs-config"]),
    # two jobs answering to one name: the error names both classes
    "one name, two jobs": (
        lambda shop: shop,
        "contract_shop_twice",
        ["FirstTick", "SecondTick", "contract-tick"],
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
@pytest.mark.parametrize("entry_point", sorted(IN_PROCESS))
def test_each_entry_point_refuses_the_same_mistake_with_the_same_words(
    entry_point: str, mistake: str, shop: Path
):
    config_for, packages, named = MISTAKES[mistake]
    options = EkbatanOptions(config=config_for(shop), packages=(packages,))
    # each entry point raises its own type; the words are the contract
    with pytest.raises(Exception) as refused, IN_PROCESS[entry_point](options):
        pass
    message = str(refused.value)
    assert all(word in message for word in named), f"{entry_point}: {message}"


@pytest.mark.slow
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_ekbatan_worker_refuses_the_same_mistake_with_the_same_words(
    mistake: str, shop: Path, tmp_path: Path
):
    config_for, packages, named = MISTAKES[mistake]
    stderr = tmp_path / "worker.err"
    with worker(config_for(shop), packages, stderr) as process:
        process.communicate(timeout=60)
    message = stderr.read_text()
    assert process.returncode == 1, message
    assert all(word in message for word in named), message


@pytest.mark.slow
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_fastapi_under_uvicorn_refuses_the_same_mistake_with_the_same_words(
    mistake: str, shop: Path, tmp_path: Path
):
    config_for, packages, named = MISTAKES[mistake]
    stderr = tmp_path / "uvicorn.log"
    with uvicorn(config_for(shop), packages, stderr) as (process, _):
        process.wait(60)
    message = stderr.read_text()
    assert process.returncode != 0, message  # uvicorn's own code for a failed lifespan
    assert all(word in message for word in named), message
