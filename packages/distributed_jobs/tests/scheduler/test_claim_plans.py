"""The claim's plan does not grow with the backlog, even before the table is analysed.

A burst of scheduled work lands in a table whose statistics are stale until autovacuum gets
to it. The claim must still walk ``execution_time_idx`` in order and stop at its limit; a plan
that gathers every due row and sorts them costs each claim the whole backlog.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import Tasks
from ekbatan.distributed_jobs.scheduler._table.repository import TaskRepository
from ekbatan.distributed_jobs.scheduler._table.unresolved import TaskResolver
from ekbatan.distributed_jobs.scheduler.dialects import resolve_dialect

BACKLOG = 20_000


def noop(instance, ctx):
    return None


def bulk_load_without_statistics(engine: sa.Engine) -> None:
    """``BACKLOG`` due rows of task ``one``, inserted as a bulk schedule does, in a table that
    autovacuum is told to leave alone (so it stays unanalysed for the whole test)."""
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE scheduled_tasks SET (autovacuum_enabled = false)")
        conn.exec_driver_sql(
            "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) "
            "SELECT 'one', 'i' || g, now() - interval '1 minute', false, 1 "
            f"FROM generate_series(1, {BACKLOG}) g"
        )
        [never_analysed] = conn.exec_driver_sql(
            "SELECT last_analyze IS NULL AND last_autoanalyze IS NULL FROM pg_stat_user_tables "
            "WHERE relid = 'scheduled_tasks'::regclass"  # this test's schema's table
        ).one()
    assert never_analysed


def claim_statement(
    engine: sa.Engine, limit: int, names: tuple[str, ...] = ("one", "two")
) -> tuple[str, dict]:
    """The lock-and-fetch claim as the engine sends it, with its parameters (the claimed rows
    stay claimed: each call takes ``limit`` more), by a process knowing the tasks ``names``."""
    repository = TaskRepository(
        engine,
        resolve_dialect(engine),
        TaskResolver([Tasks.one_time(name).execute(noop) for name in names]),
        picked_by="node-1",
    )
    sent: list[tuple[str, dict]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "SKIP LOCKED" in statement:
            sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        claimed = repository.lock_and_fetch(datetime.now(UTC) + timedelta(seconds=1), limit)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert len(claimed) == limit
    [(statement, parameters)] = sent
    return statement, parameters


@pytest.mark.dialects("postgres")
# the default's claims: one row per thread (10) until executions are timed, then up to 10 per
# thread; a claim near the backlog's size may sort it whole, which then costs little
@pytest.mark.parametrize("limit", [10, 100])
def test_a_claim_walks_the_execution_time_index_on_a_table_never_analysed(engine, limit):
    bulk_load_without_statistics(engine)
    statement, parameters = claim_statement(engine, limit)
    with engine.connect() as conn:
        plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN (COSTS OFF) {statement}", parameters).scalars().all())
    assert "Index Scan using execution_time_idx" in plan, plan
    # the only sort allowed is the outer one over the claimed rows, not one under the LIMIT
    inner = plan[plan.index("LockRows") :]
    assert "Bitmap" not in inner and "Sort" not in inner and "Seq Scan" not in inner, plan


def bulk_load_with_stale_statistics(engine: sa.Engine) -> None:
    """MariaDB: statistics taken of the empty table and kept (no background recalculation),
    then ``BACKLOG`` due rows of task ``one`` — as a burst leaves a table until InnoDB's
    recalculation gets to it."""
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE scheduled_tasks STATS_AUTO_RECALC = 0")
        conn.exec_driver_sql("ANALYZE TABLE scheduled_tasks").all()
        conn.exec_driver_sql(
            "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) "
            f"SELECT 'one', CONCAT('i', seq), UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, 0, 1 FROM seq_1_to_{BACKLOG}"
        )


@pytest.mark.dialects("mariadb")
@pytest.mark.parametrize("limit", [10, 100])
def test_a_claim_of_the_one_task_a_process_knows_walks_the_index_and_locks_only_its_rows(engine, limit):
    """One known name is an equality on the primary key's first column: with stale statistics
    MariaDB took it for a key lookup, read and locked every due row, and sorted them."""
    bulk_load_with_stale_statistics(engine)
    statement, parameters = claim_statement(engine, limit, names=("one",))
    with engine.connect() as conn:
        [plan] = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).mappings().all()
    assert plan["key"] == "execution_time_idx" and "filesort" not in (plan["Extra"] or ""), plan
    # claimed as a claim does, in a transaction of its own: only the rows it returns locked
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(statement, parameters).all()
        [locked] = conn.exec_driver_sql(
            "SELECT trx_rows_locked FROM information_schema.innodb_trx "
            "WHERE trx_mysql_thread_id = CONNECTION_ID()"
        ).one()
        conn.rollback()
    assert len(rows) == limit
    # a few lock records per claimed row (the index entry walked, the row), never the backlog's
    assert locked <= 4 * limit, locked
