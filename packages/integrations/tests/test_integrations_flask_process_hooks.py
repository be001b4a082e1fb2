"""The Flask extension and the process: importing it registers nothing (no atexit handler, no fork
hook); a forked child builds its own graph on first use; an exit stops what the process started.

Each test runs its program in a fresh interpreter, the only place where process-wide
registrations, fork and interpreter exit can be observed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import load_settings, migrate

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[2]

#: the scheduler idles between its first runs and an hour later: nothing it does races a fork
QUIET_JOBS = {
    "polling-interval": "PT1H",
    "heartbeat-interval": "PT1H",
    "shutdown-max-wait": "PT10S",
    "history": {"enabled": False},
}

#: the programs' common start: their reports go to stdout as JSON lines, the log to stderr
PRELUDE = """
import json, logging, os, sys, threading
from datetime import timedelta
from flask import Flask
from ekbatan.distributed_jobs import DistributedJob, Schedules
from testsupport import wait_until

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(process)d %(name)s: %(message)s")


def report(**fields):
    print(json.dumps({"pid": os.getpid(), **fields}), flush=True)


class Hourly(DistributedJob):
    def __init__(self, execute=lambda: None):
        self._execute = execute
        self.runs = 0

    def name(self):
        return "hourly"

    def schedule(self):
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx):
        self._execute()
        self.runs += 1
"""


def run_program(program: str, cwd: Path, **values: Any) -> tuple[list[dict[str, Any]], str]:
    """Run ``PRELUDE + program`` (``{name}`` filled from ``values``, as Python literals) in a
    fresh interpreter; its reports, and its log."""
    source = PRELUDE + textwrap.dedent(program).format(**{k: repr(v) for k, v in values.items()})
    path = os.pathsep.join(filter(None, [str(TESTS), str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", source],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def log_lines(log: str, pid: int, message: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(f"{pid} ") and message in line]


def picked(url: str, task: str) -> bool:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql(
                "SELECT picked FROM scheduled_tasks WHERE task_name = ?", (task,)
            ).all()
    finally:
        engine.dispose()
    assert len(rows) == 1, rows
    return bool(rows[0][0])


def quiet_app(tmp_path: Path) -> tuple[Path, str]:
    url = sqlite_with_wallets(tmp_path)
    config = application_yml(tmp_path, url, handling=False, extra={"jobs": QUIET_JOBS})
    migrate(load_settings(config))
    return config, url


def test_importing_the_extension_registers_nothing_and_the_first_start_one_stop_at_exit(tmp_path):
    config, _ = quiet_app(tmp_path)
    [imported, started], _ = run_program(
        """
        import atexit
        # what the extension imports, first: only its own registrations are counted
        import click, flask, werkzeug.local
        import ekbatan.core, ekbatan.core.sharding, ekbatan.distributed_jobs.scheduler
        import ekbatan.integrations.discovery, ekbatan.integrations.flask_cli
        import ekbatan.integrations.flask_operator, ekbatan.integrations.health
        import ekbatan.integrations.metrics_exposition, ekbatan.integrations.options
        import ekbatan.integrations.runtime

        at_fork = []  # the modules of the fork hooks registered from here on
        register_at_fork = os.register_at_fork


        def recording_at_fork(**hooks):
            at_fork.extend(hook.__module__ for hook in hooks.values())
            register_at_fork(**hooks)


        os.register_at_fork = recording_at_fork
        before = atexit._ncallbacks()

        from ekbatan.integrations.flask import Ekbatan

        app = Flask("registering")
        app.config.update(EKBATAN_CONFIG={config}, EKBATAN_PACKAGES="")
        ekbatan = Ekbatan(app, extra_jobs=[Hourly()])
        ekbatan.runtime_for(app)  # built, not started
        report(atexit=atexit._ncallbacks() - before, at_fork=[m for m in at_fork if m.startswith("ekbatan")])

        before = atexit._ncallbacks()
        ekbatan.start(app)
        ekbatan.stop(app)
        ekbatan.start(app)  # a new graph: the stop at exit is registered once per process
        report(atexit=atexit._ncallbacks() - before, at_fork=[m for m in at_fork if m.startswith("ekbatan")])
        """,
        tmp_path,
        config=str(config),
    )
    assert (imported["atexit"], imported["at_fork"]) == (0, [])
    assert (started["atexit"], started["at_fork"]) == (1, [])


def test_a_child_forked_after_the_start_builds_its_own_graph_and_the_parent_keeps_its_own(tmp_path):
    config, _ = quiet_app(tmp_path)
    reports, log = run_program(
        """
        import faulthandler, uuid
        from decimal import Decimal
        from ekbatan.integrations.flask import Ekbatan
        from integrations_sample.domain import Deposit, DepositParams

        WALLET = uuid.uuid4()
        hourly = Hourly()
        app = Flask("forking")
        app.config.update(EKBATAN_CONFIG={config}, EKBATAN_PACKAGES="integrations_sample.domain")
        ekbatan = Ekbatan(app, extra_jobs=[hourly])
        parents = ekbatan.start(app)


        def no_thread_in_the_database():
            # fork() copies the driver's locks as they are: one held by another thread stays
            # held in the child, so fork only while the scheduler's threads wait
            def in_database(frame):
                while frame is not None:
                    if "sqlalchemy" in frame.f_code.co_filename:
                        return True
                    frame = frame.f_back
                return False

            mine = threading.get_ident()
            frames = sys._current_frames()
            return not any(in_database(f) for ident, f in frames.items() if ident != mine)


        def fork():
            wait_until(lambda: hourly.runs and no_thread_in_the_database(), timeout=30)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                faulthandler.dump_traceback_later(60, exit=True)  # a child stuck would outlive us
            return pid


        if fork() == 0:
            report(role="idle child")
            sys.exit(0)  # never used: nothing of its own to stop, and the parent's is not its own
        _, status = os.wait()
        report(role="parent", child_exit=os.waitstatus_to_exitcode(status))

        if fork() == 0:
            child = ekbatan.start(app)
            balance = ekbatan.runtime_for(app).action_executor.execute(
                Deposit(), DepositParams(wallet_id=WALLET, amount=Decimal(2))
            )
            report(
                role="child",
                fresh=child is not parents and child.database_registry is not parents.database_registry,
                started=child.started and child.job_registry.scheduler.is_started,
                balance=str(balance),
            )
            sys.exit(0)  # without stop: the exit stops it
        _, status = os.wait()
        report(role="parent", child_exit=os.waitstatus_to_exitcode(status))

        balance = parents.action_executor.execute(Deposit(), DepositParams(wallet_id=WALLET, amount=Decimal(3)))
        report(
            role="parent",
            same=ekbatan.start(app) is parents and ekbatan.runtime_for(app) is parents,
            started=parents.started and parents.job_registry.scheduler.is_started,
            balance=str(balance),
        )
        ekbatan.stop(app)
        """,
        tmp_path,
        config=str(config),
    )
    idle, first_exit, child, second_exit, parent = reports
    assert idle["role"] == "idle child" and child["role"] == "child"
    assert first_exit == second_exit == {"pid": parent["pid"], "role": "parent", "child_exit": 0}
    assert (child["fresh"], child["started"], Decimal(child["balance"])) == (True, True, 2), child
    # the parent's graph still runs, and its pools see what the child wrote
    assert (parent["same"], parent["started"], Decimal(parent["balance"])) == (True, True, 5), parent

    def lines(report: dict[str, Any], message: str) -> list[str]:
        return log_lines(log, report["pid"], message)

    assert len(lines(parent, "ekbatan started for 'forking'")) == 1, log
    assert len(lines(child, "ekbatan started for 'forking'")) == 1, log
    assert len(lines(parent, "ekbatan stopped for 'forking'")) == 1, log
    assert len(lines(child, "ekbatan stopped for 'forking'")) == 1, log
    assert lines(idle, "ekbatan") == [], log


def test_a_process_that_started_and_exits_without_stop_is_stopped_and_its_job_drained(tmp_path):
    config, url = quiet_app(tmp_path)
    [exiting], log = run_program(
        """
        import atexit
        from ekbatan.integrations.flask import Ekbatan

        running, leaving = threading.Event(), threading.Event()


        def until_the_interpreter_exits():
            running.set()
            leaving.wait(60)


        hourly = Hourly(until_the_interpreter_exits)
        app = Flask("exiting")
        app.config.update(EKBATAN_CONFIG={config}, EKBATAN_PACKAGES="")
        ekbatan = Ekbatan(app, extra_jobs=[hourly])
        ekbatan.start(app)
        wait_until(running.is_set, timeout=30, message="the job runs")
        # runs at exit before the extension's stop (registered by the start): the job returns as
        # soon as the stop would wait for it
        atexit.register(leaving.set)
        report(runs=hourly.runs)
        """,
        tmp_path,
        config=str(config),
    )
    assert exiting["runs"] == 0, "the job was still running when the program ended"
    assert len(log_lines(log, exiting["pid"], "ekbatan stopped for 'exiting'")) == 1, log
    # the stop drained the job and wrote its completion; without a stop the row stays picked
    assert not picked(url, "hourly")
