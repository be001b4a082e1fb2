"""``ekbatan worker`` as a real process: scans a package of jobs, runs them, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from integrations_support import application_yml

from ekbatan.integrations.cli import main
from testsupport import wait_until
from testsupport.private_servers import private_server
from testsupport.prometheus_scrape import PER_ITEM_LABELS, scrape

JOBS = '''
import time
from datetime import timedelta

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job


@distributed_job
class SlowJob(DistributedJob):
    """Runs for a while each time, so that SIGTERM arrives while its row is picked."""

    def name(self) -> str:
        return "slow-job"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(milliseconds=100))

    def execute(self, ctx: JobContext) -> None:
        time.sleep(0.5)
'''


def read_line(process: subprocess.Popen, timeout: float) -> str:
    """The process's next line of output, or a failure after ``timeout`` seconds."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no output within {timeout} s"
    line = process.stdout.readline()
    assert line, f"the process exited ({process.wait(timeout=10)}): {process.stderr.read()}"
    return line


def stop_with_sigterm(worker: subprocess.Popen) -> None:
    """SIGTERM: the worker stops cleanly, exits 0 and says so last."""
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"event": "stopped", "signal": "SIGTERM", "abandoned": 0}


def kill(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.kill()
    worker.communicate(timeout=10)  # also closes the pipes of a worker that exited by itself


def test_the_worker_runs_jobs_and_stops_cleanly_on_sigterm(app_db, tmp_path):
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(JOBS))
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    engine = sa.create_engine(app_db.url)

    def slow_job_row() -> tuple | None:
        with engine.connect() as connection:
            return connection.execute(
                sa.text("SELECT picked, last_success FROM scheduled_tasks WHERE task_name = 'slow-job'")
            ).first()

    command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--config", str(config)]
    worker = subprocess.Popen(
        [*command, "--packages", "myjobs", "--json", "--metrics-port", "0"],
        cwd=tmp_path,  # the worker puts its working directory on the import path
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(read_line(worker, timeout=60))
        assert started["event"] == "started" and started["jobs"] == ["slow-job"]
        wait_until(lambda: (row := slow_job_row()) and row[1] is not None, timeout=30, message="slow-job ran")
        # --metrics-port 0: a free port on 127.0.0.1, said in the started line; a real scrape
        assert started["metrics_url"].startswith("http://127.0.0.1:"), started

        def scraped() -> object:
            got = scrape(started["metrics_url"])
            return got if got.value("ekbatan_executions_total", task="slow-job", result="succeeded") else None

        metrics = wait_until(scraped, timeout=10, message="a run counted at /metrics")
        runs = metrics.value("ekbatan_executions_total", task="slow-job", result="succeeded")
        timed = metrics.value("ekbatan_execution_duration_seconds_count", task="slow-job", result="succeeded")
        assert timed == runs, metrics.text
        # each run sleeps 0.5 s: none of them is in a bucket below it
        assert metrics.value("ekbatan_execution_duration_seconds_bucket", task="slow-job", le="0.25") == 0
        assert metrics.value("process_cpu_seconds_total") > 0, "the process collectors are served too"
        assert not metrics.label_names() & PER_ITEM_LABELS
        wait_until(lambda: (row := slow_job_row()) and row[0], timeout=30, message="slow-job picked again")
        stop_with_sigterm(worker)
        with engine.connect() as connection:
            picked = connection.execute(
                sa.text("SELECT count(*) FROM scheduled_tasks WHERE picked = :t"), {"t": True}
            )
            assert picked.scalar_one() == 0
    finally:
        kill(worker)
        engine.dispose()


def test_a_worker_with_nothing_to_run_says_so(tmp_path):
    (tmp_path / "empty_pkg").mkdir()
    (tmp_path / "empty_pkg" / "__init__.py").write_text("")
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ekbatan.integrations.cli",
            "worker",
            "--config",
            str(config),
            "--packages",
            "empty_pkg",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: nothing to run: no @distributed_job, @event_handler or task found in empty_pkg; check --packages"
    )


@pytest.mark.slow
def test_wait_for_database_starts_the_worker_before_its_database_and_runs_the_jobs_once_it_is_up(tmp_path):
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(JOBS))
    with private_server("postgres") as server:
        config = application_yml(tmp_path, server.url)
        assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
        server.stop()
        command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--config", str(config)]
        command += ["--packages", "myjobs", "--json"]

        # the default: fail at once, naming the pool
        failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert failed.returncode == 1, failed.stderr
        assert "jobs-config" in failed.stderr and "cannot connect" in failed.stderr, failed.stderr

        worker = subprocess.Popen(
            [*command, "--wait-for-database"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        engine = sa.create_engine(server.url, poolclass=sa.NullPool)
        try:
            started = json.loads(read_line(worker, timeout=60))
            assert started["event"] == "started" and started["waiting_for_database"] is True, started
            server.start()

            def last_success() -> object:
                with engine.connect() as connection:
                    return connection.execute(
                        sa.text("SELECT last_success FROM scheduled_tasks WHERE task_name = 'slow-job'")
                    ).scalar()

            wait_until(last_success, timeout=60, message="slow-job ran once the database was up")
            stop_with_sigterm(worker)
        finally:
            kill(worker)
            engine.dispose()


def test_wait_for_database_and_migrate_together_are_refused(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    result = CliRunner().invoke(
        main,
        ["worker", "--config", str(config), "--packages", "x", "--migrate", "--wait-for-database"],
    )
    assert result.exit_code == 2, result.output
    assert "migrations need the database" in result.output, result.output


OPTIONS = '''
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules
from ekbatan.integrations.options import EkbatanOptions

URL = {url!r}


class MarkJob(DistributedJob):
    """Given through --options, not scanned: writes a row each time it runs."""

    def name(self) -> str:
        return "mark-job"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))  # runs at start-up

    def execute(self, ctx: JobContext) -> None:
        engine = sa.create_engine(URL, poolclass=sa.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("INSERT INTO marks (task) VALUES ('mark-job')"))
        finally:
            engine.dispose()


def options() -> EkbatanOptions:
    return EkbatanOptions(extra_jobs=[MarkJob()], customize_scheduler=lambda builder: builder.threads(2))
'''


@pytest.mark.dialects("sqlite", "postgres")
def test_options_give_the_worker_jobs_that_are_not_scanned(app_db, tmp_path):
    (tmp_path / "worker_options.py").write_text(textwrap.dedent(OPTIONS).format(url=app_db.url))
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    engine = sa.create_engine(app_db.url, poolclass=sa.NullPool)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE marks (task VARCHAR(40))"))

    def marks() -> int:
        with engine.connect() as connection:
            return connection.execute(sa.text("SELECT count(*) FROM marks")).scalar_one()

    command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--config", str(config)]
    worker = subprocess.Popen(
        [*command, "--options", "worker_options:options", "--json"],  # no --packages: the options' jobs
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(read_line(worker, timeout=60))
        assert started["event"] == "started" and started["jobs"] == ["mark-job"], started
        assert started["metrics_url"] is None, "no metrics served unless asked"
        wait_until(marks, timeout=30, message="mark-job wrote its row")
        stop_with_sigterm(worker)
        assert marks() == 1
    finally:
        kill(worker)
        engine.dispose()


def test_flags_win_over_the_options(tmp_path, monkeypatch):
    (tmp_path / "migrating_options.py").write_text(
        "from ekbatan.integrations.options import EkbatanOptions\n"
        "OPTIONS = EkbatanOptions(packages=['shop'], migrate_on_start=True)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # --wait-for-database over the options' migrate_on_start: the refusal of the two together
    result = CliRunner().invoke(
        main, ["worker", "--options", "migrating_options:OPTIONS", "--wait-for-database"]
    )
    assert result.exit_code == 2, result.output
    assert "migrations need the database" in result.output, result.output


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("worker_options", "--options 'worker_options': write MODULE:NAME naming an EkbatanOptions"),
        (
            "no_such_module_here:OPTIONS",
            "--options no_such_module_here:OPTIONS: cannot load it: No module named",
        ),
        ("os:no_such_name", "--options os:no_such_name: cannot load it: module 'os' has no attribute"),
        ("os:sep", f"--options os:sep is {os.sep!r}; write MODULE:NAME naming an EkbatanOptions"),
        ("os:getpid", "--options os:getpid returned "),
    ],
)
def test_a_bad_options_value_is_named_with_what_to_write(value, says):
    result = CliRunner().invoke(main, ["worker", "--options", value, "--packages", "shop"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert says in message, message
    assert "a function of no argument returning one, e.g. shop.worker:OPTIONS" in message, message


def test_a_metrics_port_already_taken_is_refused_before_anything_starts(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    package = tmp_path / "myjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(JOBS))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "ekbatan.integrations.cli", "worker", "--config", str(config)]
        worker = subprocess.run(
            [*command, "--packages", "myjobs", "--metrics-port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert worker.returncode == 1, worker.stdout + worker.stderr
    assert f"cannot serve the metrics on 127.0.0.1:{port}" in worker.stderr, worker.stderr
    assert "pick another --metrics-port (0 picks a free one)" in worker.stderr
    assert "Traceback" not in worker.stderr
