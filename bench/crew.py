"""The process crew of the benchmarks: processes spawned together that report ready, start on
one signal and report once at the end."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def spawn_context() -> Any:
    return mp.get_context("spawn")


@dataclass
class Crew:
    """K worker processes that have reported ready and wait for ``go``."""

    processes: list[Any]
    pipes: list[Any]
    go: Any
    stop: Any
    ready: list[dict[str, Any]]

    def release(self) -> float:
        t0 = time.perf_counter()
        self.go.set()
        return t0

    def finish(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Tell every worker to stop; collect their reports; kill any straggler."""
        self.stop.set()
        reports: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        for pipe in self.pipes:
            left = max(0.1, deadline - time.monotonic())
            if pipe.poll(left):
                try:
                    reports.append(pipe.recv())
                except EOFError:
                    reports.append({"error": "worker exited without a report"})
            else:
                reports.append({"error": "no report before the deadline"})
        terminate(self.processes)
        return reports


def start_crew(
    target: Callable[..., None], args_for: Sequence[tuple[Any, ...]], timeout: float = 60.0
) -> Crew:
    """Start one process per ``args_for`` entry: ``target(pipe, go, stop, *args)``.

    Each must send one ``{"event": "ready", ...}`` dict once it has imported, connected and
    built what it needs, then wait for ``go``; after ``stop`` it sends one report dict.
    """
    ctx = spawn_context()
    go, stop = ctx.Event(), ctx.Event()
    processes, pipes = [], []
    for args in args_for:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(child, go, stop, *args), daemon=True)
        p.start()
        child.close()
        processes.append(p)
        pipes.append(parent)
    ready = []
    deadline = time.monotonic() + timeout
    for pipe, p in zip(pipes, processes, strict=True):
        if not pipe.poll(max(0.1, deadline - time.monotonic())):
            terminate(processes)
            raise RuntimeError(f"worker {p.pid} did not report ready within {timeout:.0f}s")
        msg = pipe.recv()
        if msg.get("event") != "ready":
            terminate(processes)
            raise RuntimeError(f"worker {p.pid} failed to start: {msg}")
        ready.append(msg)
    return Crew(processes, pipes, go, stop, ready)


def terminate(processes: Sequence[Any], grace: float = 5.0) -> None:
    """Join, then SIGTERM, then SIGKILL — each process by its own handle."""
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(grace)
        if p.is_alive():
            p.kill()
            p.join(1.0)
