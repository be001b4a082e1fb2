"""A finished one-time execution's row stays picked until the completion writer's delete
commits; it must keep heartbeating meanwhile, or a delete held up longer than the dead window
(a busy SQLite file, a slow commit) would see it revived and run a second time."""

from __future__ import annotations

import threading
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler import Scheduler, Tasks
from testsupport import wait_until

# A dead window of 1.6 s: long enough that a heartbeat loop stalled by a busy host (a loaded
# CI machine once held it past a 0.4 s window, and the row was revived) is not taken for a dead
# one; the test still holds the delete for more than two of them.
HEARTBEAT = timedelta(milliseconds=200)
MISSED_LIMIT = 8
DEAD_WINDOW = HEARTBEAT * MISSED_LIMIT


def test_a_finished_execution_keeps_heartbeating_while_its_delete_is_held_up(engine):
    runs: list[str] = []
    task = Tasks.one_time("t").execute(lambda instance, ctx: runs.append(instance.id))
    delete_reached, release = threading.Event(), threading.Event()

    def hold_the_delete(conn, cursor, statement, parameters, context, executemany):
        # the writer thread stops here, before its DELETE reaches the database
        if statement.lstrip().upper().startswith("DELETE") and not release.is_set():
            delete_reached.set()
            release.wait(30)

    scheduler = (
        Scheduler.create(engine, task)
        .heartbeat_interval(HEARTBEAT)
        .missed_heartbeats_limit(MISSED_LIMIT)
        .polling_interval(timedelta(milliseconds=100))
        .poll_using_fetch()
        .build()
    )
    row = lambda: scheduler.repository.get_execution("t", "held")  # noqa: E731
    sa.event.listen(engine, "before_cursor_execute", hold_the_delete)
    try:
        with scheduler:
            scheduler.schedule(task.instance("held"))
            assert delete_reached.wait(10), "the task should run and its completion reach the delete"
            finished = row()
            assert finished is not None and finished.last_heartbeat is not None
            # The delete is held for two dead windows: the row's heartbeat keeps moving, so this
            # scheduler's own dead-execution check (every two heartbeats) never revives it.
            wait_until(
                lambda: (
                    (current := row()) is not None
                    and current.last_heartbeat is not None
                    and current.last_heartbeat - finished.last_heartbeat > 2 * DEAD_WINDOW
                ),
                timeout=20,
                message="heartbeats of the finished row while its delete waits",
            )
            still = row()
            assert still is not None and still.version == finished.version, "revived while its delete waited"
            release.set()
            wait_until(lambda: row() is None, timeout=10, message="the row deleted once released")
        assert runs == ["held"], "it ran once"
    finally:
        release.set()
        sa.event.remove(engine, "before_cursor_execute", hold_the_delete)
