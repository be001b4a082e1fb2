"""``uvicorn --workers N`` exits 0 when a worker's lifespan fails, so docs/wiring/fastapi.md
tells deployers to gate on the readiness endpoint instead of the exit status.

The process test pins uvicorn's behaviour that the page describes: should a uvicorn release
start exiting non-zero, it fails and the page must change with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "wiring" / "fastapi.md"

APP = """
from datetime import timedelta

from fastapi import FastAPI

from ekbatan.distributed_jobs import DistributedJob, Schedules, distributed_job
from ekbatan.integrations.fastapi import ekbatan_lifespan, health_router


@distributed_job
class Nightly(DistributedJob):
    def name(self):
        return "nightly"

    def schedule(self):
        return Schedules.fixed_delay(timedelta(hours=24))

    def execute(self, ctx):
        pass


app = FastAPI(lifespan=ekbatan_lifespan("application.yml", [__name__]))
app.include_router(health_router())
"""

# the jobs pool is a SQLite file in a directory that does not exist: start() cannot open it
APPLICATION_YML = """
ekbatan:
  sharding:
    default-shard: {group: 0, member: 0}
    groups:
      - group: 0
        name: global
        members:
          - member: 0
            configs:
              primary-config: {url: "sqlite:///app.sqlite"}
              jobs-config: {url: "sqlite:////no/such/directory/jobs.sqlite"}
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_uvicorn_workers_exit_0_when_ekbatan_cannot_start(tmp_path):
    (tmp_path / "unready_app.py").write_text(textwrap.dedent(APP), "utf-8")
    (tmp_path / "application.yml").write_text(APPLICATION_YML, "utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "uvicorn", "unready_app:app", "--workers", "2"]
    command += ["--host", "127.0.0.1", "--port", str(free_port())]
    finished = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    output = finished.stdout + finished.stderr
    assert "JobsDatabaseUnavailableError: cannot connect to the jobs pool" in output, output
    assert "failed to start, stopping the parent process" in output, output
    assert finished.returncode == 0, output  # not a failure, as far as the exit status goes


def test_the_fastapi_page_says_so_and_gates_the_deploy_on_readiness():
    text = " ".join(PAGE.read_text("utf-8").split())
    assert "**exits with status 0**" in text
    assert (
        "do not trust the exit status: make the [readiness endpoint](#the-readiness-endpoint) the signal"
        in text
    )
    assert "curl --fail" in text and "/health/ekbatan" in text and "readinessProbe" in text
