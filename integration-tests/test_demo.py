"""The demos: the README's first command (the whole product) and the engine's own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_every_one_time_task_exactly_once(tmp_path):
    finished = subprocess.run(
        [sys.executable, "-m", "ekbatan.distributed_jobs.demo", "--seconds", "4", "--tasks", "6"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the system temp dir, for this run only
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "one-time executions: 6 of 6 (each exactly once: True)" in finished.stdout
    assert "rows left in scheduled_tasks: ['report/recurring']" in finished.stdout
    assert not list(tmp_path.iterdir()), "the demo left its temporary directory behind"


def _product_demo(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "ekbatan.integrations.cli", "demo", "--tasks", "60", "--orders", "20", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


@pytest.mark.slow
def test_the_product_demo_proves_its_guarantees_on_sqlite(tmp_path):
    finished = _product_demo(tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    out = finished.stdout
    assert "✘" not in out
    for line in (
        "✔ every one-time task ran: 60 of 60",
        "✔ every event reached both handlers: 20 of 20",
        "✔ nothing left picked: 0 picked row(s)",
    ):
        assert line in out, out
    assert "SIGKILL worker-" in out and "revived" in out
    assert not list(tmp_path.iterdir()), "the demo left its temporary directory behind"


@pytest.mark.slow
@pytest.mark.dialects("postgres", "mariadb")
def test_the_product_demo_runs_on_a_server(dialect, database, tmp_path):
    finished = _product_demo(tmp_path, "--url", database.url)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "✘" not in finished.stdout
    assert "✔ every one-time task ran: 60 of 60" in finished.stdout
