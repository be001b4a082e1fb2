"""``JobRegistry.run_until_signal()``: a plain script stopped by SIGTERM releases its job's row.

The main test runs a real script in its own OS process and sends it SIGTERM while its job is
running; the in-process tests cover the returned signal, the restored handlers and the
refusal off the main thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs import DistributedJob, JobRegistry, Schedules
from ekbatan.distributed_jobs.scheduler import create_table
from testsupport import IsolatedDatabase

REPO_ROOT = Path(__file__).resolve().parents[4]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from datetime import timedelta

    import sqlalchemy as sa

    from ekbatan.distributed_jobs import DistributedJob, JobRegistry, Schedules


    class UntilShutdown(DistributedJob):
        def name(self):
            return "until-shutdown"

        def schedule(self):
            return Schedules.fixed_delay(timedelta(hours=1))

        def execute(self, ctx):
            print("running", flush=True)
            while not ctx.is_shutting_down:
                time.sleep(0.02)


    engine = sa.create_engine(sys.argv[1])
    registry = (
        JobRegistry.builder()
        .connection_provider(engine)
        .with_job(UntilShutdown())
        .poll_interval(timedelta(milliseconds=50))
        .shutdown_max_wait(timedelta(minutes=10))
        .build()
    )
    received = registry.run_until_signal()
    print("stopped by", received.name, flush=True)
    engine.dispose()
    """
)


class Noop(DistributedJob):
    def name(self) -> str:
        return "noop"

    def schedule(self):
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx) -> None:
        return None


def picked(engine: sa.Engine, task_name: str) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text("SELECT picked FROM scheduled_tasks WHERE task_name = :name"), {"name": task_name}
            ).scalar_one()
        )


@pytest.mark.dialects("postgres", "sqlite")
def test_sigterm_stops_the_script_and_releases_the_running_jobs_row(database: IsolatedDatabase) -> None:
    engine = database.engine()
    create_table(engine)
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, database.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # blocks until the job runs (or the process dies)
        assert first == "running\n", process.stderr.read() if process.stderr else first
        assert picked(engine, "until-shutdown")
        process.send_signal(signal.SIGTERM)
        # Stopping waits up to 2 × 10 minutes for a job that ignores the shutdown: a process
        # that ends within this deadline had its job return at its first shutdown check.
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, err
    assert "stopped by SIGTERM" in out, err
    assert not picked(engine, "until-shutdown")  # released now, not revived a minute later


def sqlite_registry(tmp_path: Path) -> tuple[sa.Engine, JobRegistry]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    create_table(engine)
    registry = (
        JobRegistry.builder()
        .connection_provider(engine)
        .with_job(Noop())
        .register_shutdown_hook(False)
        .shutdown_max_wait(timedelta(seconds=1))
        .build()
    )
    return engine, registry


def test_returns_the_signal_and_restores_the_previous_handler(tmp_path: Path) -> None:
    engine, registry = sqlite_registry(tmp_path)

    def mine(_signum, _frame) -> None:
        return None

    previous = signal.signal(signal.SIGUSR1, mine)
    try:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        received = registry.run_until_signal((signal.SIGUSR1,))
        timer.join()
        assert received == signal.SIGUSR1
        assert signal.getsignal(signal.SIGUSR1) is mine
        assert registry.scheduler.is_shutting_down and not registry.scheduler.is_started
    finally:
        signal.signal(signal.SIGUSR1, previous)
        engine.dispose()


def test_refused_off_the_main_thread(tmp_path: Path) -> None:
    engine, registry = sqlite_registry(tmp_path)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            registry.run_until_signal()
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=call, name="not-main")
    worker.start()
    worker.join(5)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "main thread" in str(errors[0]) and "not-main" in str(errors[0])
    assert not registry.scheduler.is_started  # refused before starting anything
    engine.dispose()
