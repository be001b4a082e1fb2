"""Executions claimed for real and kept running until the test lets them finish: what a node
holding picked rows looks like, without sleeping."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ekbatan.distributed_jobs.scheduler import Scheduler


class RunGate:
    """A task body that holds every run until :meth:`open`; open it in a ``finally`` (or a
    fixture's teardown) so that a failed test leaves no run blocked."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def run(self, instance: object, ctx: object) -> None:
        assert self.opened.wait(30), "the test never opened the gate"

    def open(self) -> None:
        self.opened.set()


def hold_claims(scheduler: Scheduler, runs: int) -> list[threading.Thread]:
    """``runs`` callers of ``scheduler.run_any_due_executions``: a caller runs what it claims one
    by one, so each claims one due execution and stays in its run — ``runs`` picked at once."""
    threads = [threading.Thread(target=scheduler.run_any_due_executions, daemon=True) for _ in range(runs)]
    for thread in threads:
        thread.start()
    return threads


def release(gate: RunGate, threads: list[threading.Thread], timeout: float = 10.0) -> None:
    """Open the gate and wait for the held runs to finish."""
    gate.open()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a held run did not finish"


def open_gate_after() -> Iterator[RunGate]:
    """A gate for a fixture to ``yield from``: opened at teardown, so that a failed test leaves
    no run blocked."""
    gate = RunGate()
    yield gate
    gate.open()
