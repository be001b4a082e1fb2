"""The FastAPI wallet deployed as a user would: migrations first, then ``uvicorn --workers 2``
against a fresh PostgreSQL database; HTTP deposits, the handler, the recurring job, the
one-time receipt task each deposit schedules, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from testsupport import create_isolated_database, wait_until
from testsupport.prometheus_scrape import PER_ITEM_LABELS, scrape

EXAMPLES = Path(__file__).resolve().parent / "examples"
DEPOSITS = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_uvicorn_workers_share_the_jobs_and_stop_cleanly(tmp_path):
    database = create_isolated_database("postgres", scope="database", prefix="fastapi")
    env = {
        **os.environ,
        "WALLET_DATABASE_URL": database.url,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
    }
    log_path = tmp_path / "uvicorn.log"
    server: subprocess.Popen[bytes] | None = None
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    try:
        migrated = subprocess.run(
            [sys.executable, "-m", "fastapi_wallet.migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        port = free_port()
        command = [sys.executable, "-m", "uvicorn", "fastapi_wallet.app:app", "--workers", "2"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--timeout-graceful-shutdown", "10"]
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                command,
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def output() -> str:
            return log_path.read_text("utf-8", errors="replace")

        def both_workers_started() -> bool:
            assert server.poll() is None, f"uvicorn exited with {server.returncode}:\n{output()}"
            return output().count("Application startup complete.") == 2

        wait_until(both_workers_started, timeout=30, interval=0.1, message="both workers to start")

        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10) as client:
            assert client.get("/health/ekbatan").status_code == 200
            wallets = [uuid.uuid4() for _ in range(DEPOSITS)]
            serving_pids = set()
            receipts: dict[str, uuid.UUID] = {}  # deposit id (the receipt's instance id) -> wallet
            for wallet in wallets:
                reply = client.post(f"/wallets/{wallet}/deposits", json={"amount": "2.50"})
                assert reply.status_code == 200, reply.text
                assert reply.json()["balance"] in ("2.50", "2.5")
                serving_pids.add(reply.json()["pid"])
                assert reply.json()["receipt_scheduled"] is True, reply.text
                receipts[reply.json()["deposit_id"]] = wallet
        assert len(receipts) == DEPOSITS  # one instance id per deposit

        def handled() -> set[str]:
            with engine.connect() as connection:
                return {r[0] for r in connection.exec_driver_sql("SELECT wallet_id FROM handled_deposits")}

        wait_until(
            lambda: handled() >= {str(w) for w in wallets},
            timeout=20,
            interval=0.1,
            message="every deposit handled",
        )

        def slots() -> int:
            with engine.connect() as connection:
                return connection.exec_driver_sql("SELECT COUNT(DISTINCT slot) FROM top_up_runs").scalar_one()

        def receipt_runs() -> list[Any]:  # rows of (deposit_id, wallet_id, amount, pid)
            with engine.connect() as connection:
                return list(
                    connection.exec_driver_sql(
                        "SELECT deposit_id, wallet_id, amount, pid FROM wallet_receipts"
                    )
                )

        wait_until(
            lambda: {r.deposit_id for r in receipt_runs()} >= set(receipts),
            timeout=20,
            interval=0.1,
            message="every deposit's receipt task run",
        )

        wait_until(lambda: slots() >= 4, timeout=20, interval=0.1, message="a few slots of the recurring job")

        def handler_calls() -> list[Any]:
            with engine.connect() as connection:
                return list(connection.exec_driver_sql("SELECT pid FROM handled_deposits"))

        # /metrics: each worker serves its own counters, so each scrape must agree with the rows
        # of the worker that answered it (a completion is counted just after its body wrote them)
        agreed: dict[int, tuple[float, float]] = {}

        def a_scrape_agrees_with_its_worker() -> bool:
            got = scrape(f"{base}/metrics")
            assert got.headers["content-type"].startswith("text/plain; version=0.0.4"), got.headers
            assert not got.label_names() & PER_ITEM_LABELS, got.label_names()
            pid = int(got.headers["x-worker-pid"])
            receipts_run = sum(1 for r in receipt_runs() if r.pid == pid)
            calls = sum(1 for r in handler_calls() if r.pid == pid)
            counted = got.value("ekbatan_executions_total", task="wallet-receipt", result="succeeded")
            timed = got.value(
                "ekbatan_execution_duration_seconds_count", task="wallet-receipt", result="succeeded"
            )
            handled = got.value("ekbatan_handler_duration_seconds_count", handler="deposit-recorder")
            if (counted, timed, handled) != (receipts_run, receipts_run, calls):
                return False
            agreed[pid] = (counted, handled)
            return len(agreed) == 2  # both workers answered at least once

        wait_until(
            a_scrape_agrees_with_its_worker, timeout=20, interval=0.05, message="/metrics of both workers"
        )
        assert sum(counted for counted, _ in agreed.values()) == DEPOSITS, agreed
        openmetrics = scrape(f"{base}/metrics", accept="application/openmetrics-text; version=1.0.0")
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text"), (
            openmetrics.headers
        )
        assert "ekbatan_executions" in openmetrics.family_names()

        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"uvicorn did not exit within 30 s of SIGTERM:\n{output()}")
        assert code == 0, f"uvicorn exited with {code}:\n{output()}"
        assert output().count("Application shutdown complete.") == 2, output()

        with engine.connect() as connection:
            events = {r[0] for r in connection.exec_driver_sql("SELECT id FROM eventlog.events")}
            handled_events = [
                r[0] for r in connection.exec_driver_sql("SELECT event_id FROM handled_deposits")
            ]
            runs = connection.exec_driver_sql("SELECT slot, pid FROM top_up_runs").all()
            receipts_left = connection.exec_driver_sql(
                "SELECT task_instance FROM scheduled_tasks WHERE task_name = 'wallet-receipt'"
            ).all()
            picked = connection.exec_driver_sql(
                "SELECT task_name, task_instance FROM scheduled_tasks WHERE picked"
            ).all()
        # every event reached the handler (events are written only by the deposits)
        assert len(events) == DEPOSITS and set(handled_events) == events
        # each slot of the recurring job ran once across both workers
        repeated = {slot: n for slot, n in Counter(slot for slot, _ in runs).items() if n > 1}
        assert not repeated, f"slots run more than once: {repeated}"
        # each deposit's receipt ran exactly once, with its data decoded as a Receipt, and each
        # instance was deleted once it had run
        sent = receipt_runs()
        counts = Counter(r.deposit_id for r in sent)
        assert set(counts) == set(receipts), (
            f"missing {set(receipts) - set(counts)}, unknown {set(counts) - set(receipts)}"
        )
        repeated_receipts = {deposit: n for deposit, n in counts.items() if n > 1}
        assert not repeated_receipts, f"receipts run more than once: {repeated_receipts}"
        assert {(r.deposit_id, r.wallet_id, r.amount) for r in sent} == {
            (deposit, wallet, Decimal("2.50")) for deposit, wallet in receipts.items()
        }
        assert receipts_left == [], f"receipt instances left after running: {receipts_left}"
        receipt_pids = Counter(r.pid for r in sent)
        print(f"receipts run per worker pid: {dict(receipt_pids)}")  # two workers share them, or not
        # the workers ran the jobs and the tasks, never uvicorn's parent process
        assert server.pid not in {pid for _, pid in runs} and server.pid not in serving_pids
        assert server.pid not in receipt_pids
        assert picked == [], f"rows left picked after SIGTERM: {picked}"
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        engine.dispose()
        database.drop()
