"""The dependency-injector example, deployed as a user would: migrations first, then two
``python -m di_wallet`` processes on one PostgreSQL database, then SIGTERM to both."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.core import eventlog_tables, load_settings
from ekbatan.core.outbox import EventCodec, EventTypeRegistry
from ekbatan.integrations import build_runtime
from ekbatan.local_event_handler import notifications_table
from testsupport import create_isolated_database, wait_until
from testsupport.eventlog_shards import drop_eventlog

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = Path(__file__).resolve().parent / "examples"
CONFIG = EXAMPLES / "di_wallet" / "application.yml"
DEPOSITS = 200
WALLETS = 20


def _environment(url: str, eventlog: str) -> dict[str, str]:
    path = os.pathsep.join([str(EXAMPLES), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "DI_WALLET_DATABASE_URL": url, "DI_WALLET_EVENTLOG": eventlog}


def _output(path: Path) -> str:
    return path.read_text("utf-8") if path.exists() else ""


@pytest.mark.slow
@pytest.mark.dialects("postgres")
def test_two_processes_share_the_work_and_stop_cleanly(dialect, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from di_wallet.domain import Deposit, DepositParams, DepositTallied, TopUpRun

    database = create_isolated_database(dialect, scope="schema", prefix="diw")
    eventlog = f"el_{uuid.uuid4().hex[:10]}"
    env = _environment(database.url, eventlog)
    processes: list[subprocess.Popen] = []
    runtime = None
    try:
        migrated = subprocess.run(
            [sys.executable, "-m", "di_wallet", "migrate"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert migrated.returncode == 0, migrated.stderr

        for number in range(2):
            with (tmp_path / f"out{number}").open("w") as out, (tmp_path / f"err{number}").open("w") as err:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "di_wallet"], env=env, cwd=tmp_path, stdout=out, stderr=err
                    )
                )

        def all_ready() -> bool:
            for number, process in enumerate(processes):
                assert process.poll() is None, f"worker {number} exited: {_output(tmp_path / f'err{number}')}"
            return all('"ready"' in _output(tmp_path / f"out{n}") for n in range(2))

        wait_until(all_ready, timeout=30, interval=0.05, message="both workers ready")

        # the test is a third process executing actions on the same database
        # a codec of its own: other tests in this process claim the name MoneyDeposited for their class
        runtime = build_runtime(
            load_settings(CONFIG, environ=env), ["di_wallet.domain"], codec=EventCodec(EventTypeRegistry())
        )
        assert runtime.job_registry is None
        wallets = [uuid.uuid4() for _ in range(WALLETS)]
        for number in range(DEPOSITS):
            runtime.action_executor.execute(
                Deposit, DepositParams(wallet_id=wallets[number % WALLETS], amount=Decimal(number % 7 + 1))
            )

        tables = eventlog_tables("postgresql", eventlog)
        table = notifications_table("postgresql", eventlog)
        with runtime.database_registry.read_only() as connection:
            events = set(connection.execute(sa.select(tables.events.c.id)).scalars())
        assert len(events) >= DEPOSITS  # ours, and the top-ups so far

        def tallied() -> set[uuid.UUID]:
            with runtime.database_registry.read_only() as connection:
                return set(connection.execute(sa.select(DepositTallied.event_id)).scalars())

        def delivered() -> set[uuid.UUID]:
            with runtime.database_registry.read_only() as connection:
                notifications = connection.execute(
                    sa.select(table.c.event_id, table.c.state).where(
                        table.c.handler_name == "deposit-counter"
                    )
                ).all()
            return {event_id for event_id, state in notifications if state == "SUCCEEDED"}

        # a handler's own commit lands before the handling job records its notification as
        # succeeded (in a transaction of its own, after the call): wait for both
        wait_until(
            lambda: events <= tallied() and events <= delivered(),
            timeout=30,
            interval=0.1,
            message="every event handled and recorded as delivered",
        )
        with runtime.database_registry.read_only() as connection:
            ours = connection.execute(
                sa.select(sa.func.count(), sa.func.sum(DepositTallied.amount)).where(
                    DepositTallied.wallet_id.in_([str(w) for w in wallets])
                )
            ).one()
        assert tuple(ours) == (DEPOSITS, sum(Decimal(n % 7 + 1) for n in range(DEPOSITS)))

        def runs() -> list[tuple]:
            with runtime.database_registry.read_only() as connection:
                return connection.execute(sa.select(TopUpRun.execution_time, TopUpRun.pid)).all()

        wait_until(lambda: len(runs()) >= 3, timeout=20, interval=0.1, message="three top-up slots")

        for process in processes:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for number, process in enumerate(processes):
            code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
            assert code == 0, f"worker {number} exited with {code}: {_output(tmp_path / f'err{number}')}"
            assert '"stopped"' in _output(tmp_path / f"out{number}")
            assert "Traceback" not in _output(tmp_path / f"err{number}"), _output(tmp_path / f"err{number}")

        slots = collections.Counter(execution_time for execution_time, _pid in runs())
        assert [slot for slot, count in slots.items() if count > 1] == []  # each slot ran once
        assert all(slot.microsecond == 0 for slot in slots)  # the whole seconds of the cron schedule
        assert {pid for _slot, pid in runs()} <= {process.pid for process in processes}
        with runtime.database_registry.read_only() as connection:
            picked = connection.execute(sa.text("SELECT task_name FROM scheduled_tasks WHERE picked")).all()
        assert picked == []
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        if runtime is not None:
            runtime.stop()
        database.drop()
        drop_eventlog(dialect, eventlog)
