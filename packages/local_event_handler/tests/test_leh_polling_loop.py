"""The pipeline jobs' loop: when a round that found work is followed at once by another."""

from __future__ import annotations

import threading
from datetime import timedelta
from types import SimpleNamespace

from ekbatan.local_event_handler.polling_loop import run_rounds
from testsupport import wait_until

LONG_POLL = timedelta(minutes=10)


class _Ctx:
    """What the loop reads of a job's context: a healthy heartbeat and a shutdown flag."""

    job_name = "test-job"
    heartbeat_state = SimpleNamespace(has_stale_heartbeat=False, fraction_dead=0.0)

    def __init__(self) -> None:
        self.is_shutting_down = False


def _loop(again: bool) -> tuple[_Ctx, threading.Event, list[int], threading.Thread]:
    ctx, wakeup, rounds = _Ctx(), threading.Event(), []

    def drain() -> bool:
        rounds.append(1)
        return True  # every round finds work

    thread = threading.Thread(
        target=run_rounds, args=(ctx, drain, LONG_POLL, wakeup, lambda: again), daemon=True
    )
    thread.start()
    return ctx, wakeup, rounds, thread


def _stop(ctx: _Ctx, thread: threading.Thread) -> None:
    ctx.is_shutting_down = True
    thread.join(5)
    assert not thread.is_alive()


def test_a_round_with_work_is_followed_at_once_by_default():
    ctx, _wakeup, rounds, thread = _loop(again=True)
    try:
        wait_until(lambda: len(rounds) >= 50, timeout=10, message="rounds back to back")
    finally:
        _stop(ctx, thread)


def test_a_round_that_says_no_more_waits_for_a_wakeup_not_the_poll_delay():
    ctx, wakeup, rounds, thread = _loop(again=False)
    try:
        wait_until(lambda: len(rounds) == 1, timeout=10, message="the first round")
        assert not wakeup.wait(0.5) and len(rounds) == 1  # no second round without a wake-up
        wakeup.set()
        wait_until(lambda: len(rounds) == 2, timeout=5, message="a round as soon as woken")
    finally:
        _stop(ctx, thread)
