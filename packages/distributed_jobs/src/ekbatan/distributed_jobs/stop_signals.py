"""Waiting for a stop signal in a process's main thread: the one loop behind
``JobRegistry.run_until_signal``, the ``ekbatan worker`` command and the demo's workers."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

__all__ = ["StopSignals"]


class StopSignals:
    """While the ``with`` block runs, ``signals`` are recorded instead of acted on; ``wait()``
    blocks until one arrives. Leaving the block restores the previous handlers, so a second
    Ctrl-C or SIGTERM during a long drain after it gets the previous handling (by default:
    interrupt, terminate) instead of being ignored. Only the main thread may enter it: Python
    installs signal handlers there alone."""

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.signals = [signal.Signals(s) for s in signals]
        if not self.signals:
            raise ValueError("StopSignals needs at least one signal to wait for")
        self._received: list[signal.Signals] = []
        self._previous: dict[signal.Signals, Any] = {}

    @property
    def received(self) -> signal.Signals | None:
        """The first signal received, or None."""
        return self._received[0] if self._received else None

    def _note(self, signum: int, _frame: object) -> None:
        # Only record it: the handler interrupts the main thread anywhere, even inside a lock's
        # critical section, so it must not take locks (Event.set() does) or raise.
        self._received.append(signal.Signals(signum))

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "stop signals can be waited for only in the main thread: Python installs signal handlers "
                f"only there, and this is {threading.current_thread().name!r}"
            )
        self._previous = {sig: signal.signal(sig, self._note) for sig in self.signals}
        return self

    def wait(self, poll: float = 0.05) -> signal.Signals:
        """Block until one of the signals arrives; return it."""
        while not self._received:
            time.sleep(poll)
        return self._received[0]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}
