"""``cancel_held`` on every dialect: a held execution (dead, or paused one by one) is dropped for
good, only from the held table and, when a state is named, only while it is held as that."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    HoldError,
    HoldState,
    SchedulerClient,
    SettableClock,
    Tasks,
)

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def fail(instance, ctx) -> None:
    raise RuntimeError("out of luck")


DOOMED = (
    Tasks.one_time("doomed")
    .on_failure(FailureHandlers.max_retries(0).retry_every(timedelta(0)).then_dead_letter())
    .execute(fail)
)
QUIET = Tasks.one_time("quiet").execute(lambda instance, ctx: None)


@pytest.fixture
def client(engine: sa.Engine, clock: SettableClock) -> SchedulerClient:
    return SchedulerClient(engine, [DOOMED, QUIET], clock=clock)


def test_a_dead_and_a_paused_execution_are_dropped_for_good(manual, client):
    scheduler = manual(DOOMED)
    client.schedule(DOOMED.instance("d-1"), T0)
    client.schedule(DOOMED.instance("d-2"), T0 + timedelta(days=1))
    scheduler.run_any_due_executions()
    assert client.get_held_execution("doomed", "d-1").state is HoldState.DEAD
    client.schedule(QUIET.instance("p-1"), T0 + timedelta(hours=1))
    assert client.pause_execution(("quiet", "p-1"))

    client.cancel_held("doomed", "d-1", state=HoldState.DEAD)
    client.cancel_held("quiet", "p-1", state="paused")

    assert client.get_held_execution("doomed", "d-1") is None
    assert client.get_held_execution("quiet", "p-1") is None
    assert client.get_scheduled_execution(("doomed", "d-1")) is None
    assert client.get_scheduled_execution(("quiet", "p-1")) is None
    # nothing else went: the other execution of the task stays scheduled
    assert client.get_scheduled_execution(("doomed", "d-2")) is not None
    with pytest.raises(HoldError, match="doomed/d-1 is not held"):
        client.cancel_held("doomed", "d-1")


def test_a_held_execution_in_another_state_than_named_is_kept(client):
    client.schedule(QUIET.instance("p-1"), T0 + timedelta(hours=1))
    assert client.pause_execution(("quiet", "p-1"))
    with pytest.raises(HoldError, match="quiet/p-1 is not held as dead"):
        client.cancel_held("quiet", "p-1", state=HoldState.DEAD)
    assert client.get_held_execution("quiet", "p-1").state is HoldState.PAUSED
    with pytest.raises(ValueError):
        client.cancel_held("quiet", "p-1", state="gone")
    assert client.get_held_execution("quiet", "p-1") is not None


def test_the_scheduled_execution_of_the_same_key_is_never_touched(client):
    # resumed meanwhile: the key is scheduled again and held no more; cancel() would delete the
    # scheduled one, cancel_held() refuses and leaves it
    client.schedule(QUIET.instance("p-1"), T0 + timedelta(hours=1))
    assert client.pause_execution(("quiet", "p-1"))
    client.resume_execution(("quiet", "p-1"))
    with pytest.raises(HoldError, match="quiet/p-1 is not held as paused"):
        client.cancel_held("quiet", "p-1", state=HoldState.PAUSED)
    assert client.get_scheduled_execution(("quiet", "p-1")) is not None
