"""Lock-and-fetch rows waiting in the local queue heartbeat like running ones, and a claim
lost while queued is not run here."""

from __future__ import annotations

import collections
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import CandidateEventType, ScheduledExecutionsFilter, Scheduler, Tasks
from testsupport import EventRecorder, wait_until

pytestmark = pytest.mark.dialects("postgres", "mariadb", "mysql")


def _scheduler(engine, task, recorder=None, heartbeat_ms=100):
    builder = (
        Scheduler.create(engine, task)
        .threads(1)
        .poll_using_lock_and_fetch(0.5, 4.0)  # one worker, up to four claimed rows
        .polling_interval(timedelta(milliseconds=50))
        .heartbeat_interval(timedelta(milliseconds=heartbeat_ms))
        .missed_heartbeats_limit(4)
        .shutdown_max_wait(timedelta(seconds=5))
        .listen_for_notifications(False)
    )
    if recorder is not None:
        builder.add_listener(recorder)
    return builder.build()


def _blocked_task():
    """A task whose instance ``0-blocker`` holds the one worker until ``release`` is set."""
    release = threading.Event()
    runs = collections.Counter()

    def handler(instance, ctx):
        runs[instance.id] += 1
        if instance.id == "0-blocker":
            release.wait(10)

    return release, runs, Tasks.one_time("t").execute(handler)


def test_queued_claims_heartbeat_so_nobody_revives_them(engine):
    release, runs, task = _blocked_task()
    owner = _scheduler(engine, task)
    detector = _scheduler(engine, task)  # never started: only its dead-execution pass runs
    owner.schedule_batch([task.instance(i) for i in ("0-blocker", "1", "2", "3")])
    with owner:
        wait_until(lambda: runs["0-blocker"] == 1, timeout=10, message="the blocker runs")
        assert len(owner.queued_claims) == 3, "three claimed rows wait behind the blocker"
        # wait well past the dead threshold (4 x 100 ms), checking for dead rows meanwhile
        deadline = threading.Event()
        threading.Timer(1.2, deadline.set).start()
        while not deadline.is_set():
            detector.run_dead_execution_detection()
            deadline.wait(0.1)
        release.set()
        wait_until(lambda: sum(runs.values()) == 4, timeout=10, message="all four run")
    assert runs == {"0-blocker": 1, "1": 1, "2": 1, "3": 1}
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM scheduled_tasks")).scalar() == 0


def test_a_claim_lost_while_queued_is_not_run_here(engine):
    release, runs, task = _blocked_task()
    recorder = EventRecorder()
    owner = _scheduler(engine, task, recorder)
    owner.schedule_batch([task.instance(i) for i in ("0-blocker", "1")])
    with owner:
        wait_until(lambda: runs["0-blocker"] == 1 and len(owner.queued_claims) == 1, timeout=10)
        # another instance took row "1" over (revived and re-claimed it): its version moved on
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE scheduled_tasks SET version = version + 2 WHERE task_instance = '1'")
            )
        wait_until(
            lambda: owner.queued_claims._lost, timeout=10, message="the next heartbeat finds the claim lost"
        )
        release.set()
        wait_until(lambda: recorder.candidate_events[CandidateEventType.STALE] == 1, timeout=10)
    assert runs == {"0-blocker": 1}, "the lost claim must not run here"


def test_shutdown_gives_back_claims_no_worker_started(engine):
    """Stopping with claimed rows still queued behind a running execution: they are unpicked
    (for any instance to run) instead of run during the shutdown or left for dead detection."""
    release, runs, task = _blocked_task()
    owner = _scheduler(engine, task)
    owner.schedule_batch([task.instance(i) for i in ("0-blocker", "1", "2", "3")])

    def rows() -> dict[str, tuple[bool, str | None, int]]:
        return {
            e.instance_id: (e.is_picked, e.picked_by, e.execution.version)
            for e in owner.get_scheduled_executions(ScheduledExecutionsFilter.all())
        }

    owner.start()
    wait_until(lambda: runs["0-blocker"] == 1, timeout=10, message="the blocker runs")
    assert len(owner.queued_claims) == 3
    stopping = threading.Thread(target=owner.stop)
    stopping.start()
    try:
        wait_until(
            lambda: (
                {k: v[:2] for k, v in rows().items() if k != "0-blocker"}
                == {"1": (False, None), "2": (False, None), "3": (False, None)}
            ),
            timeout=10,
            message="the three queued claims given back while the blocker still runs",
        )
        assert runs["0-blocker"] == 1 and rows()["0-blocker"][:2] == (True, owner.name)
    finally:
        release.set()
        stopping.join(10)
    assert runs == {"0-blocker": 1}, "a given-back claim must not run here"
    assert {k: v for k, v in rows().items()} == {
        "1": (False, None, 3),  # version 1, claimed (2), given back (3)
        "2": (False, None, 3),
        "3": (False, None, 3),
    }


def test_a_claim_the_stopping_pool_refuses_is_given_back_at_once(engine):
    """A poller slow to stop may claim after the shutdown gave its queue back: the rows its
    stopping pool refuses are unpicked by that poll itself, not left for dead detection."""
    release, runs, task = _blocked_task()
    owner = _scheduler(engine, task)
    owner.schedule_batch([task.instance(i) for i in ("1", "2")])
    owner.pause()  # the scheduler's own poller claims nothing; this test polls by hand
    owner.start()
    try:
        pool = owner._pool
        pool.stop_accepting()
        result = owner._poller.strategy.run()
        assert result.fetched == 2
        rows = {
            e.instance_id: (e.is_picked, e.picked_by, e.execution.version)
            for e in owner.get_scheduled_executions(ScheduledExecutionsFilter.all())
        }
        assert rows == {"1": (False, None, 3), "2": (False, None, 3)}  # claimed (2), given back (3)
        assert len(owner.queued_claims) == 0 and not runs
    finally:
        release.set()
        owner.stop()
