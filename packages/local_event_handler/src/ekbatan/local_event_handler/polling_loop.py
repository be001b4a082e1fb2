"""The loop both pipeline jobs run for as long as they hold their row.

A round that found work is followed at once by another (unless the job knows the next would be
empty: see ``again``); an empty round waits ``poll_delay`` or until a wake-up (a notification that
new work was written), whichever comes first. The
loop returns — a normal completion, which releases the row for the next run — when the
scheduler shuts down, checked at least every 200 ms so shutdown never waits a whole long
poll delay, or when this instance's heartbeats have fallen so far behind that another
instance may soon take the row over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from ekbatan.distributed_jobs import JobContext

log = logging.getLogger("ekbatan.local_event_handler")

#: the longest the loop sleeps without looking at the scheduler's state
_SHUTDOWN_CHECK = 0.2
#: a heartbeat this far into the dead window (1.0 = revivable) ends the run before it overlaps
_BAIL_OUT_FRACTION = 0.5


def run_rounds(
    ctx: JobContext,
    drain_one_round: Callable[[], bool],
    poll_delay: timedelta,
    wakeup: threading.Event,
    again: Callable[[], bool] = lambda: True,
) -> None:
    """``again()`` after a round that found work: whether to start the next one at once. When it
    says no, the loop waits as after an empty round — and a wake-up set during the round ends
    that wait at once."""
    delay = poll_delay.total_seconds()
    while not ctx.is_shutting_down:
        heartbeat = ctx.heartbeat_state
        if heartbeat.has_stale_heartbeat and heartbeat.fraction_dead > _BAIL_OUT_FRACTION:
            log.warning(
                "%s: heartbeats are failing (%s); ending this run so another instance can take over cleanly",
                ctx.job_name,
                heartbeat,
            )
            return
        wakeup.clear()
        if drain_one_round() and again():
            continue
        remaining = delay
        while remaining > 0 and not ctx.is_shutting_down:
            step = min(remaining, _SHUTDOWN_CHECK)
            if wakeup.wait(step):
                break
            remaining -= step
