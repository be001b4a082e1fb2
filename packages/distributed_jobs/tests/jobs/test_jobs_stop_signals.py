"""StopSignals: the one wait for a stop signal behind run_until_signal and ekbatan worker."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from ekbatan.distributed_jobs import StopSignals
from testsupport import wait_until


def test_a_signal_is_recorded_not_acted_on_and_the_previous_handler_comes_back():
    seen: list[str] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: seen.append("previous handler"))
    try:
        with StopSignals((signal.SIGUSR1,)) as stop:
            assert stop.received is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.wait() is signal.SIGUSR1
            assert stop.received is signal.SIGUSR1
        assert seen == []  # recorded while the block ran, not passed on
        os.kill(os.getpid(), signal.SIGUSR1)  # after the block: the previous handler again
        wait_until(lambda: seen == ["previous handler"], timeout=5, message="the previous handler ran")
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_only_the_main_thread_may_wait_and_some_signal_must_be_named():
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            with StopSignals():
                pass
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=elsewhere, name="not-main")
    thread.start()
    thread.join(5)
    assert len(errors) == 1 and "only in the main thread" in str(errors[0]) and "'not-main'" in str(errors[0])
    with pytest.raises(ValueError, match="at least one signal"):
        StopSignals(())
