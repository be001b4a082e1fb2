"""The Flask wallet service deployed as a user would: migrations with ``flask ekbatan migrate``,
then gunicorn with two workers against MariaDB, driven over HTTP and stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from testsupport import create_isolated_database, wait_until
from testsupport.eventlog_shards import drop_eventlog
from testsupport.prometheus_scrape import PER_ITEM_LABELS, scrape

EXAMPLES = Path(__file__).parent / "examples"
DEPOSITS = 12


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as response:
        return json.loads(response.read())


def rows(engine: sa.Engine, sql: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.exec_driver_sql(sql)]


def create_service_tables(engine: sa.Engine) -> None:
    """The service's own tables (an Alembic migration in real life)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from flask_wallet.wallet import Base
    finally:
        sys.path.remove(str(EXAMPLES))
    Base.metadata.create_all(engine)


@pytest.mark.slow
@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-load", "preload"])
def test_gunicorn_two_workers_run_each_slot_once_handle_every_event_and_stop_cleanly(tmp_path, preload):
    database = create_isolated_database("mariadb", prefix="fw")
    eventlog = f"el_{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
        "FLASK_WALLET_DB_URL": database.url,
        "FLASK_WALLET_EVENTLOG": eventlog,
        "XDG_RUNTIME_DIR": str(tmp_path),  # gunicorn's control socket, away from other test runs
    }
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    server = None
    log_path = tmp_path / "gunicorn.log"
    try:
        assert database.url.startswith("mariadb+pymysql://")
        migrated = subprocess.run(
            [sys.executable, "-m", "flask", "--app", "flask_wallet", "ekbatan", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        applied = [
            line.split()[:4] for line in migrated.stdout.splitlines() if line.startswith("global/member-0")
        ]
        assert ["global/member-0", "mariadb", "event_notifications", "1"] in applied, migrated.stdout
        create_service_tables(engine)

        port = free_port()
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(EXAMPLES / "flask_wallet" / "gunicorn.conf.py"),
        ]
        command += ["-w", "2", "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "20"]
        command += ["--preload"] if preload else []
        with log_path.open("w") as log_file:
            server = subprocess.Popen(
                [*command, "flask_wallet:create_app()"],
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                start_new_session=True,
            )

        def log() -> str:
            return log_path.read_text()

        def started_pids() -> set[int]:
            return {
                int(pid) for pid in re.findall(r"ekbatan started for 'flask_wallet' in process (\d+)", log())
            }

        # Both workers start their job registry as they boot, before any request reaches them.
        wait_until(lambda: len(started_pids()) >= 2 or server.poll() is not None, timeout=30, message="boot")
        assert server.poll() is None, log()
        wait_until(
            lambda: rows(engine, "SELECT COUNT(*) FROM fw_top_up_runs")[0][0] >= 2,
            timeout=20,
            message="top-ups before any request",
        )

        deposits = {f"http-{i}": uuid.uuid4() for i in range(DEPOSITS)}
        serving_pids = set()
        for deposit_id, wallet in deposits.items():
            answer = post(
                f"http://127.0.0.1:{port}/deposits",
                {"wallet": str(wallet), "amount": "2.50", "deposit_id": deposit_id},
            )
            assert answer["balance"] == "2.50"
            serving_pids.add(answer["pid"])

        def handled() -> set[str]:
            return {
                deposit_id for (deposit_id,) in rows(engine, "SELECT deposit_id FROM fw_handled_deposits")
            }

        wait_until(lambda: set(deposits) <= handled(), timeout=30, message="every deposit handled")
        wait_until(
            lambda: rows(engine, "SELECT COUNT(*) FROM fw_top_up_runs")[0][0] >= 4,
            timeout=20,
            message="top-ups",
        )

        # /metrics: each worker serves its own counters, so each scrape must agree with the rows
        # of the worker that answered it (polled: a completion is counted just after its body ran)
        agreed: dict[int, float] = {}

        def a_scrape_agrees_with_its_worker() -> bool:
            got = scrape(f"http://127.0.0.1:{port}/metrics")
            assert not got.label_names() & PER_ITEM_LABELS, got.label_names()
            pid = int(got.headers["x-worker-pid"])
            calls = len(rows(engine, f"SELECT deposit_id FROM fw_handled_deposits WHERE pid = {pid}"))
            slots_run = len(rows(engine, f"SELECT slot FROM fw_top_up_runs WHERE pid = {pid}"))
            handled = got.value("ekbatan_handler_duration_seconds_count", handler="deposit-recorder")
            topped = got.value("ekbatan_executions_total", task="wallet-top-up", result="succeeded")
            if (handled, topped) != (calls, slots_run):
                return False
            agreed[pid] = handled
            return len(agreed) == 2  # both workers answered at least once

        wait_until(
            a_scrape_agrees_with_its_worker, timeout=20, interval=0.05, message="/metrics of both workers"
        )
        assert sum(agreed.values()) >= DEPOSITS, agreed

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, log()
        output = log()

        booted = {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", output)}
        assert len(booted) == 2, output
        assert started_pids() == booted, "each worker started once; the master (preloaded or not) never did"
        assert server.pid not in started_pids()
        stopped = {
            int(pid) for pid in re.findall(r"ekbatan stopped for 'flask_wallet' in process (\d+)", output)
        }
        assert stopped == booted, output
        assert serving_pids <= booted

        slots = Counter(slot for (slot,) in rows(engine, "SELECT slot FROM fw_top_up_runs"))
        assert slots and max(slots.values()) == 1, f"a slot ran twice: {slots}"
        assert {pid for (pid,) in rows(engine, "SELECT pid FROM fw_top_up_runs")} <= booted
        assert rows(engine, "SELECT task_name FROM scheduled_tasks WHERE picked = 1") == []
        assert sorted(rows(engine, "SELECT task_name FROM scheduled_tasks")) == [
            ("ekbatan-event-fanout",),
            ("ekbatan-event-handling",),
            ("ekbatan-history-prune",),
            ("wallet-top-up",),
        ]
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        engine.dispose()
        database.drop()
        drop_eventlog("mariadb", eventlog)


@pytest.mark.slow
def test_flask_run_with_the_reloader_starts_in_the_child_only(tmp_path):
    url = f"sqlite:///{tmp_path / 'wallet.sqlite'}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
        "FLASK_WALLET_DB_URL": url,
    }
    env.pop("WERKZEUG_RUN_MAIN", None)
    flask = [sys.executable, "-m", "flask", "--app", "flask_wallet"]
    migrated = subprocess.run(
        [*flask, "ekbatan", "migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    create_service_tables(engine)
    log_path = tmp_path / "flask-run.log"
    server = None
    try:
        with log_path.open("w") as log_file:
            server = subprocess.Popen(
                [*flask, "run", "--debug", "--reload", "--port", str(free_port())],
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                start_new_session=True,
            )

        def runs() -> list[int]:
            return [pid for (pid,) in rows(engine, "SELECT pid FROM fw_top_up_runs")]

        # no request at all: the reloader's child starts as it loads the application
        wait_until(lambda: len(runs()) >= 3 or server.poll() is not None, timeout=30, message="top-ups")
        assert server.poll() is None, log_path.read_text()
        (child,) = set(runs())
        assert child != server.pid, "the reloader's parent never starts the job registry"
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        engine.dispose()
