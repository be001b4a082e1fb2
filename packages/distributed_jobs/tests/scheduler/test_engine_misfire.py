"""Misfire policies and fixed rate on every dialect: what a recurring task does with the slots
that passed while the cluster was stopped, while it was paused, or while its previous run went
on; which it runs, which it skips, and the ``missed`` rows the history keeps of the latter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ekbatan.distributed_jobs.scheduler import (
    FixedRate,
    MisfirePolicy,
    RunResult,
    Scheduler,
    SchedulerClient,
    Tasks,
)

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = FixedRate(timedelta(minutes=1))


def at(minutes: int, seconds: int = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


class Ticks:
    """A recurring task recording the slot (due time) of each run; ``hold_for`` moves the
    settable clock during a run, as a run that long would."""

    def __init__(
        self, clock, policy: MisfirePolicy | str | None = None, hold_for: timedelta | None = None
    ) -> None:
        self.slots: list[datetime] = []
        self.clock = clock
        self.hold_for = hold_for
        builder = Tasks.recurring("tick", MINUTE)
        if policy is not None:
            builder = builder.misfire(policy)
        self.task = builder.execute(self._run)

    def _run(self, instance, ctx) -> None:
        self.slots.append(ctx.execution.execution_time)
        if self.hold_for is not None:
            self.clock.advance(self.hold_for)


def build(engine, clock, ticks: Ticks, name: str = "node-1") -> Scheduler:
    builder = Scheduler.create(engine, ticks.task).clock(clock).scheduler_name(name).failure_logging("OFF")
    return builder.execution_history().build()


def drain(scheduler: Scheduler) -> None:
    """Run until nothing is due (a caught-up slot is due at once)."""
    for _ in range(50):
        if scheduler.run_any_due_executions() == 0:
            return
    raise AssertionError("still running after 50 polls")


@pytest.fixture
def client(engine, clock) -> SchedulerClient:
    return SchedulerClient(engine, clock=clock)


def row(client: SchedulerClient):
    execution = client.get_scheduled_execution(("tick", "recurring"))
    assert execution is not None
    return execution


def missed_rows(client: SchedulerClient):
    return client.history("tick", result=RunResult.MISSED)


def test_run_once_runs_an_overdue_slot_once_after_the_cluster_was_stopped(engine, clock, built, client):
    ticks = Ticks(clock)  # the default policy
    first = build(engine, clock, ticks)
    built.append(first)
    client.schedule(ticks.task.default_instance(), at(1))
    clock.set(at(1))
    drain(first)
    first.stop()
    assert ticks.slots == [at(1)] and row(client).execution_time == at(2)

    clock.set(at(5, 30))  # the whole cluster was down for four slots
    second = build(engine, clock, ticks, "node-2")
    built.append(second)
    drain(second)

    assert ticks.slots == [at(1), at(2)]  # the overdue row ran once
    assert row(client).execution_time == at(6)
    [missed] = missed_rows(client)
    assert missed.execution_time == at(3) and missed.error.message.startswith("3 slots missed")
    summary = {s.task_name: s for s in client.history_summary(since=T0)}["tick"]
    assert (summary.runs, summary.failures, summary.missed, summary.last_result) == (
        2,
        0,
        1,
        RunResult.SUCCEEDED,
    )


def test_skip_does_not_run_a_slot_later_than_its_grace(engine, clock, built, client):
    ticks = Ticks(clock, MisfirePolicy.skip(timedelta(seconds=30)))
    scheduler = build(engine, clock, ticks)
    built.append(scheduler)
    client.schedule(ticks.task.default_instance(), at(1))

    clock.set(at(1, 20))  # late, within the grace
    drain(scheduler)
    assert ticks.slots == [at(1)]
    before = row(client)

    clock.set(at(5, 10))  # the 12:02 slot is 3 min 10 s late
    drain(scheduler)
    assert ticks.slots == [at(1)]
    after = row(client)
    assert after.execution_time == at(6) and not after.is_picked
    # a skip is not a run: its bookkeeping stays as the last run left it
    assert (after.last_success, after.last_failure, after.consecutive_failures) == (
        before.last_success,
        before.last_failure,
        0,
    )
    [missed] = missed_rows(client)
    assert (missed.execution_time, missed.started, missed.picked_by) == (at(2), None, "node-1")
    assert missed.error.message.startswith("4 slots missed (2024-01-01T12:02:00+00:00")

    clock.set(at(6, 5))
    drain(scheduler)
    assert ticks.slots == [at(1), at(6)]


def test_a_paused_job_skips_its_slots_and_records_them_when_resumed(engine, clock, built, client):
    ticks = Ticks(clock, "skip|PT30S")
    scheduler = build(engine, clock, ticks)
    built.append(scheduler)
    client.schedule(ticks.task.default_instance(), at(1))
    client.pause_task("tick", reason="maintenance")
    for minute in range(1, 6):
        clock.set(at(minute, 5))
        drain(scheduler)
    assert ticks.slots == []
    assert row(client).execution_time == at(1)  # paused: the row keeps its due time

    client.resume_task("tick")
    clock.set(at(5, 10))
    drain(scheduler)
    assert ticks.slots == []  # every slot of the pause was past its grace
    assert row(client).execution_time == at(6)
    [missed] = missed_rows(client)
    assert missed.error.message.startswith("5 slots missed")


def test_run_all_catches_up_every_missed_slot_and_skips_a_backlog_over_its_limit(
    engine, clock, built, client
):
    ticks = Ticks(clock, MisfirePolicy.run_all(limit=5))
    scheduler = build(engine, clock, ticks)
    built.append(scheduler)
    client.schedule(ticks.task.default_instance(), at(1))
    clock.set(at(3, 30))
    drain(scheduler)
    assert ticks.slots == [at(1), at(2), at(3)]  # oldest first, each once
    assert row(client).execution_time == at(4) and missed_rows(client) == []

    clock.set(at(13, 30))  # ten slots behind: more than five
    drain(scheduler)
    assert ticks.slots == [at(1), at(2), at(3), at(4)]
    assert row(client).execution_time == at(14)
    [missed] = missed_rows(client)
    assert (missed.execution_time, missed.error.message[:15]) == (at(5), "9 slots missed ")


def test_fixed_rate_keeps_its_slots_when_a_run_takes_long(engine, clock, built, client):
    ticks = Ticks(clock, hold_for=timedelta(seconds=20))
    scheduler = build(engine, clock, ticks)
    built.append(scheduler)
    client.schedule(ticks.task.default_instance(), at(1))
    for minute in (1, 2):
        clock.set(at(minute))
        drain(scheduler)
    # 20 s runs: the next slot is still on the minute (a fixed delay would drift by 20 s a run)
    assert ticks.slots == [at(1), at(2)] and row(client).execution_time == at(3)
    assert missed_rows(client) == []

    ticks.hold_for = timedelta(seconds=150)  # a run longer than two periods
    clock.set(at(3))
    drain(scheduler)
    assert row(client).execution_time == at(6)  # the slots 12:04 and 12:05 passed during it
    [missed] = missed_rows(client)
    assert missed.execution_time == at(4) and missed.error.message.startswith("2 slots missed")


def test_a_misfire_policy_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="MisfirePolicy or its string form"):
        Tasks.recurring("tick", MINUTE).misfire(30)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unrecognized misfire policy 'skip-late'"):
        Tasks.recurring("tick", MINUTE).misfire("skip-late")
