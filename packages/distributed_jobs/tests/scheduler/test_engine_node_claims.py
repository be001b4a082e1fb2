"""``SchedulerClient.claims_by_node``: per scheduler node, the executions it runs now and the
newest and oldest of their heartbeats, as real claims write them — on every dialect."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    NodeClaims,
    Scheduler,
    SchedulerClient,
    SettableClock,
    Tasks,
)
from testsupport import wait_until
from testsupport.held_runs import RunGate, hold_claims, open_gate_after, release


@pytest.fixture
def gate() -> Iterator[RunGate]:
    yield from open_gate_after()


def node(
    engine: sa.Engine, clock: SettableClock, name: str, gate: RunGate, built: list[Scheduler]
) -> Scheduler:
    task = Tasks.one_time("held-open").execute(gate.run)
    scheduler = (
        Scheduler.create(engine, task).clock(clock).scheduler_name(name).failure_logging("OFF").build()
    )
    built.append(scheduler)
    return scheduler


def claims_when(
    client: SchedulerClient, wanted: Callable[[list[NodeClaims]], bool]
) -> list[NodeClaims] | None:
    claims = client.claims_by_node()
    return claims if wanted(claims) else None


def test_picked_executions_are_counted_per_node_with_their_heartbeats(engine, clock, built, gate):
    client = SchedulerClient(engine, clock=clock)
    task = Tasks.one_time("held-open").execute(gate.run)
    for n in range(3):
        client.schedule(task.instance(f"a-{n}"), clock.now())
    client.schedule(task.instance("later"), clock.now() + timedelta(days=1))  # not picked: not counted
    assert client.claims_by_node() == []

    started = clock.now()
    first = hold_claims(node(engine, clock, "node-a", gate, built), 3)
    wait_until(lambda: [c.running for c in client.claims_by_node()] == [3], message="node-a claims 3")

    # node-b's clock runs an hour ahead of the reader's: its heartbeat is in the reader's future
    ahead = SettableClock(clock.now() + timedelta(hours=1))
    client.schedule(task.instance("b-1"), clock.now())
    second = hold_claims(node(engine, ahead, "node-b", gate, built), 1)
    claims = wait_until(lambda: claims_when(client, lambda c: len(c) == 2), message="node-b claims b-1")
    assert claims == [
        NodeClaims("node-a", 3, started, started),
        NodeClaims("node-b", 1, ahead.now(), ahead.now()),
    ]
    assert claims[1].newest_heartbeat is not None and claims[1].newest_heartbeat > clock.now()

    release(gate, first + second)
    assert client.claims_by_node() == []  # a finished run clears its heartbeat


def test_heartbeats_of_one_node_span_its_oldest_and_newest_claim(engine, clock, built, gate):
    client = SchedulerClient(engine, clock=clock)
    task = Tasks.one_time("held-open").execute(gate.run)
    client.schedule(task.instance("early"), clock.now())
    scheduler = node(engine, clock, "node-a", gate, built)
    first_claimed = clock.now()
    first = hold_claims(scheduler, 1)
    wait_until(lambda: client.claims_by_node(), message="the first claim")
    clock.advance(timedelta(minutes=5))
    client.schedule(task.instance("late"), clock.now())
    second = hold_claims(scheduler, 1)
    [claims] = wait_until(
        lambda: claims_when(client, lambda c: bool(c) and c[0].running == 2), message="the second claim"
    )
    assert claims == NodeClaims("node-a", 2, clock.now(), first_claimed)
    release(gate, first + second)
    assert client.claims_by_node() == []
