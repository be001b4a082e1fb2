"""The demos: the README's first command (the whole product) and the engine's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime

import pytest
import sqlalchemy as sa


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
    lines = out.splitlines()
    # the figures come first: no lines of set-up before the report starts
    assert lines[0].startswith("ekbatan demo: 3 worker processes (worker-1, worker-2, worker-3)"), out
    assert lines[1].startswith(
        "100 pieces of work = 60 one-time tasks (send-invoice, due now) + 20 orders × 2 handlers"
    )
    # the per-worker totals add up to the work done, plus the recurring slots and the re-runs
    [work] = [line for line in lines if line.startswith("work by worker: ")]
    figures = re.fullmatch(
        r"work by worker: (.*) = (\d+) runs: (\d+) one-time tasks \+ (\d+) handler calls \+ "
        r"(\d+) recurring slots \+ (\d+) run again after the SIGKILL",
        work,
    )
    assert figures, work
    per_worker = [int(part.rsplit(" ", 1)[1]) for part in figures[1].split(", ")]
    parts = [int(figures[i]) for i in range(3, 7)]
    assert sum(per_worker) == int(figures[2]) == sum(parts) and parts[:2] == [60, 40], work
    assert f"({parts[3]} ran again)" in out
    # every row the killed worker held is one the others revived
    held = re.search(r"it held (\d+) row\(s\) when it died; the others revived (\d+) once", out)
    assert held and held[1] == held[2], out
    assert not list(tmp_path.iterdir()), "the demo left its temporary directory behind"


def _what_is_there(url: str) -> tuple[set[str], set[str]]:
    """The tables of the database's default schema, and the demo-named schemas (PostgreSQL) or
    databases (MariaDB) of the server: where the demo puts its tables and its eventlog."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            tables = set(inspector.get_table_names())
            schemas = {name for name in inspector.get_schema_names() if name.startswith("demo_")}
    finally:
        engine.dispose()
    return tables, schemas


@pytest.mark.slow
@pytest.mark.dialects("postgres", "mariadb")
def test_the_product_demo_runs_on_a_server_and_leaves_nothing_behind(dialect, database, tmp_path):
    before = _what_is_there(database.url)
    finished = _product_demo(tmp_path, "--url", database.url)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "✘" not in finished.stdout
    assert "✔ every one-time task ran: 60 of 60" in finished.stdout
    # the history table and an empty scheduled_tasks used to stay, and a later migrate then
    # skipped creating scheduled_tasks
    assert _what_is_there(database.url) == before


@pytest.mark.slow
@pytest.mark.dialects("postgres", "mariadb")
def test_the_product_demo_keeps_an_applications_framework_tables(dialect, database, tmp_path):
    from ekbatan.core import migrate
    from ekbatan.core.migrations import MigrationTarget

    migrate([MigrationTarget("app", database.url)])
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) "
                    "VALUES ('app-job', 'recurring', :at, :f, 1)"
                ),
                {"at": datetime(2030, 1, 1), "f": False},
            )
        history = (
            "SELECT component, version, checksum FROM ekbatan_schema_history ORDER BY component, version"
        )
        with engine.connect() as connection:
            history_before = connection.execute(sa.text(history)).all()
        before = _what_is_there(database.url)
        finished = _product_demo(tmp_path, "--url", database.url)
        assert finished.returncode == 0, finished.stdout + finished.stderr
        assert _what_is_there(database.url) == before
        with engine.connect() as connection:
            assert connection.execute(sa.text(history)).all() == history_before
            rows = connection.execute(sa.text("SELECT task_name FROM scheduled_tasks")).scalars().all()
            assert rows == ["app-job"]
    finally:
        engine.dispose()
