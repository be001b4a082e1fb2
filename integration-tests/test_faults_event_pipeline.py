"""Faults injected into the event pipeline (fan-out and handling jobs) running in real node
processes (``event_pipeline_node.py``, the nodes of ``test_event_pipeline_cluster.py``):

* the database server stopped for 20 s under two running nodes, then started: the nodes are not
  restarted, and every action recorded before and after reaches every handler, nothing lost,
  no pipeline row left picked after the dead window;
* the node running the handling job stalled (SIGSTOP) in a handler past the dead window, then
  resumed: the other node revives the job and delivers everything; the stalled node's late
  outcome (a failed try) cannot overwrite the SUCCEEDED rows the other node wrote, because
  every outcome update is guarded by the state and the attempts it read;
* a handler that hangs for some events, with ``handler_timeout`` set: the other handlers'
  deliveries go on, the hung calls count as failed tries.

Heartbeat 0.5 s × 4 missed: a 2 s dead window, as in the cluster tests.
"""

from __future__ import annotations

import collections
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider, TransactionManager, migrate
from ekbatan.core.migrations import MigrationTarget, core_migrations
from ekbatan.distributed_jobs.scheduler import create_table
from ekbatan.local_event_handler import notifications_migrations
from testsupport import wait_until
from testsupport.private_servers import PrivateServer, private_server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from event_pipeline_node import GATED_HANDLER, HANDLERS_PER_TYPE, HUNG_HANDLER, METADATA, SHARD
from test_event_pipeline_cluster import (
    ACTIONS,
    PAIRS,
    Node,
    Producer,
    Shard,
    assert_nothing_lost,
    assert_rows_released,
    cluster,
    job_failures,
    migrated_shard,
    wait_all_succeeded,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.dialects("postgres", "mariadb")]

DEAD_WINDOW = timedelta(seconds=2)
OUTAGE_S = 20


def _manager(url: str, eventlog: str) -> TransactionManager:
    return TransactionManager(
        ConnectionProvider.from_url(url, maximum_pool_size=4), shard=SHARD, eventlog_schema=eventlog
    )


@pytest.fixture
def private_shard(dialect: str) -> Iterator[tuple[Shard, PrivateServer]]:
    """A migrated shard on a private server of this test's own, which it may stop."""
    with private_server(dialect) as server:
        eventlog = f"el_{uuid.uuid4().hex[:10]}"
        migrate(
            [MigrationTarget(str(SHARD), server.url, eventlog)],
            contributions=core_migrations() + notifications_migrations(),
        )
        engine = sa.create_engine(server.url, pool_size=5, max_overflow=5, pool_pre_ping=True)
        create_table(engine)
        METADATA.create_all(engine)
        shard = Shard(SimpleNamespace(url=server.url), eventlog, engine, _manager(server.url, eventlog))  # type: ignore[arg-type]
        try:
            yield shard, server
        finally:
            shard.manager.close()
            engine.dispose()


@pytest.fixture
def shard(dialect: str) -> Iterator[Shard]:
    with migrated_shard(dialect) as migrated:
        yield migrated


def stale_picked_rows(shard: Shard) -> list[dict]:
    """Pipeline rows still picked by an owner whose last heartbeat is older than the dead window
    (and a second of slack): rows nobody works on any more."""
    old = datetime.now(UTC) - DEAD_WINDOW - timedelta(seconds=1)
    stale = []
    for row in shard.pipeline_rows().values():
        beat = row["last_heartbeat"]
        if beat is not None and beat.tzinfo is None:
            beat = beat.replace(tzinfo=UTC)
        if row["picked"] and (beat is None or beat < old):
            stale.append(row)
    return stale


# --------------------------------------------------------------------------- database restarted
#: a bound on each node's WARNING and ERROR lines over the outage: one per failing activity and
#: its recovery, one per pipeline job run that failed or was revived, one per handler call that
#: failed; not one per poll (20 s at 100 ms is 200 polls per node)
MAX_OUTAGE_LINES = 60


def outage_log(node: Node) -> tuple[list[str], list[str]]:
    """(WARNING and ERROR lines, the engine's own records with a traceback) of a node's log."""
    lines: list[str] = []
    with_traceback: list[str] = []
    logger = ""
    for line in node.log_lines():
        if line[:4].isdigit():  # a record's first line: "<time> <node> <thread> <LEVEL> <logger>: ..."
            fields = line.split(" ", 6)
            logger = fields[5].rstrip(":") if len(fields) > 5 else ""
            # A handler's own failed try (its writes fail while the server is down) is logged
            # once per try by design, as a task's own failure is: the bound is on the lines the
            # library writes about the outage itself.
            handler_failed = len(fields) > 6 and fields[6].startswith("handler '")
            if len(fields) > 6 and fields[4] in ("WARNING", "ERROR", "CRITICAL") and not handler_failed:
                lines.append(f"{fields[4]} {logger}: {fields[6][:90]}")
        elif line.startswith("Traceback") and logger.startswith("ekbatan.distributed_jobs.scheduler"):
            with_traceback.append(logger)
    return lines, with_traceback


def _most_common(lines: list[str]) -> str:
    return "\n".join(f"{n} x {line}" for line, n in collections.Counter(lines).most_common(8))


def test_database_restart_under_running_nodes_loses_no_event_and_leaves_no_row_picked(
    private_shard, tmp_path
):
    shard, server = private_shard
    before = ACTIONS // 2
    with cluster(shard, tmp_path, "node-a", "node-b") as nodes:
        pids = [node.pid for node in nodes]
        Producer(shard, before).join()
        # stop while the handling is still under way, so that rounds die mid-flight
        wait_until(
            lambda: shard.states().get("SUCCEEDED", 0) > 0,
            timeout=30,
            interval=0.05,
            message="handling began",
        )
        succeeded_at_stop = shard.states().get("SUCCEEDED", 0)
        server.stop()
        down = time.monotonic()
        time.sleep(OUTAGE_S)  # the outage itself: the nodes retry meanwhile
        server.start()
        up = time.monotonic()

        # the test's own pools hold connections the restart killed: the application's side of
        # this test is the node processes, which keep theirs
        shard.manager.close()
        shard.engine.dispose()
        shard.manager = _manager(shard.url, shard.eventlog)
        Producer(shard, ACTIONS - before).join(timeout=120)
        wait_all_succeeded(shard, nodes, timeout=120)
        recovered = time.monotonic() - up
        wait_until(
            lambda: not stale_picked_rows(shard),
            timeout=10,
            interval=0.2,
            message="no pipeline row left picked past the dead window",
        )
        assert [node.process.poll() for node in nodes] == [None, None], "a node died in the outage"
        assert [node.pid for node in nodes] == pids
        logs = {node.name: outage_log(node) for node in nodes}
        for node in nodes:
            node.terminate()
        _, times = assert_nothing_lost(shard)
        assert_rows_released(shard)

    duplicates = sum(n - 1 for n in times.values())
    print(
        f"{succeeded_at_stop}/{PAIRS} SUCCEEDED when the server stopped for {up - down:.1f}s; all "
        f"{PAIRS} SUCCEEDED {recovered:.1f}s after it was back; {duplicates} duplicate calls; "
        f"failed job runs {dict(job_failures(nodes))}"
    )
    assert succeeded_at_stop < PAIRS, "the handling finished before the outage: nothing to prove"
    for name, (lines, tracebacks) in logs.items():
        # the engine's outage lines are one-liners: a database error needs no traceback
        assert not tracebacks, f"{name}: tracebacks from {tracebacks}"
        assert len(lines) <= MAX_OUTAGE_LINES, (
            f"{name}: {len(lines)} WARNING/ERROR lines:\n{_most_common(lines)}"
        )
    print(f"WARNING/ERROR lines per node: { {name: len(lines) for name, (lines, _) in logs.items()} }")


# --------------------------------------------------------------------------- stalled handling node
STALLED_ACTIONS = 100
STALLED_PAIRS = 2 * STALLED_ACTIONS * HANDLERS_PER_TYPE


def _notification(shard: Shard, event_id: str, handler: str) -> dict:
    table = shard._notifications()
    query = sa.select(table.c.state, table.c.attempts).where(
        table.c.event_id == uuid.UUID(event_id), table.c.handler_name == handler
    )
    with shard.engine.connect() as connection:
        return dict(connection.execute(query).mappings().one())


def test_stalled_handling_node_cannot_overwrite_the_outcomes_of_the_node_that_took_over(shard, tmp_path):
    gate = tmp_path / "gate"
    gate.touch()
    with cluster(shard, tmp_path, "stalled", extra=("--gate-file", str(gate))) as (stalled,):
        producer = Producer(shard, STALLED_ACTIONS)
        blocked = stalled.wait_for("gate_blocked", timeout=60)
        producer.join()
        # every event fanned out first, so the stalled node holds no fan-out transaction open
        wait_until(
            lambda: not shard.event_ids(delivered=False),
            timeout=30,
            interval=0.1,
            message="events fanned out",
        )
        with cluster(shard, tmp_path, "rescuer") as (rescuer,):
            stalled.process.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                wait_all_succeeded(shard, [stalled, rescuer], timeout=60, pairs=STALLED_PAIRS)
                took_over = time.monotonic() - stopped_at
                taken = _notification(shard, blocked["event_id"], GATED_HANDLER)
                assert taken == {"state": "SUCCEEDED", "attempts": 1}, taken
            finally:
                gate.unlink()
                stalled.process.send_signal(signal.SIGCONT)
            stalled.wait_for("gate_released", timeout=30)
            # the stalled round then records its outcomes (the gated try failed) and its
            # execution's completion, which the engine refuses: the row changed meanwhile
            stalled.wait_for("completion_error", timeout=30)
            # said before the error is reported, on the same thread
            assert any("not recorded: the row changed meanwhile" in line for line in stalled.log_lines())
            after = _notification(shard, blocked["event_id"], GATED_HANDLER)
            states = shard.states()
            rescuer.terminate()
        stalled.terminate()
        handled, _ = assert_nothing_lost(shard, STALLED_ACTIONS)

    # its failed try changed nothing: still SUCCEEDED, with the rescuer's one attempt
    assert after == {"state": "SUCCEEDED", "attempts": 1}, after
    assert states == {"SUCCEEDED": STALLED_PAIRS}, states
    gated_calls = [
        r for r in handled if r["event_id"] == blocked["event_id"] and r["handler_name"] == GATED_HANDLER
    ]
    assert [r["node"] for r in gated_calls] == ["rescuer"], gated_calls
    print(f"the rescuer delivered everything {took_over:.1f}s after the SIGSTOP")


# --------------------------------------------------------------------------- hung handler
HUNG_EVERY = 25
HANDLER_TIMEOUT_MS = 1000


def test_hung_handler_does_not_stall_the_other_handlers(shard, tmp_path):
    options = ("--hang-every", str(HUNG_EVERY), "--handler-timeout-ms", str(HANDLER_TIMEOUT_MS))
    hung_pairs = STALLED_ACTIONS // HUNG_EVERY
    with cluster(shard, tmp_path, "node", extra=options) as (node,):
        Producer(shard, STALLED_ACTIONS).join()
        node.wait_for("hung", timeout=60)
        # every other pair is delivered while the hung calls never return
        wait_all_succeeded(shard, [node], timeout=60, pairs=STALLED_PAIRS - hung_pairs)

        def open_pairs() -> list[tuple[str, str, int]]:
            table = shard._notifications()
            query = sa.select(table.c.handler_name, table.c.state, table.c.attempts).where(
                table.c.state != "SUCCEEDED"
            )
            with shard.engine.connect() as connection:
                return [tuple(row) for row in connection.execute(query)]

        # the hung calls time out and count as failed tries, to be retried
        wait_until(
            lambda: (
                len(failed := open_pairs()) == hung_pairs
                and all(state == "FAILED" and attempts >= 1 for _, state, attempts in failed)
            ),
            timeout=30,
            interval=0.2,
            message="the hung calls recorded as failed tries",
        )
        stuck = open_pairs()
        node.terminate()
        log = "\n".join(node.log_lines())

    assert {handler for handler, _, _ in stuck} == {HUNG_HANDLER}, stuck
    assert "did not finish within 1 s (handler_timeout)" in log
