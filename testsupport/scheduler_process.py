"""A scheduler in a child OS process, for the engine's cluster, crash and shutdown tests.

Run as ``python -m testsupport.scheduler_process --url URL --name NAME --scenario S [options]``
with the repository root on ``PYTHONPATH``. The child talks JSON lines:

* to the parent, on stdout: ``{"event": "built"}``, ``{"event": "started"}``, one line per
  notable scheduler event (``{"event": "scheduler_event", "type": ...}``, never the ``RAN_*``
  ones), scenario lines such as ``{"event": "handler_started", ...}``, and finally
  ``{"event": "report", ...}`` after ``stop``;
* from the parent, on stdin: ``start`` (start the scheduler), ``stop`` (stop it, print the
  report, exit 0) and ``exit`` (return from ``main`` without stopping: the shutdown hook's job).

Scenarios (each defines the tasks the child knows):

* ``cluster`` — custom task ``Custom``: the handler does nothing; its completion records the
  instance id as OK, then removes the row (db-scheduler's ``RecordResultAndStopExecutionOnComplete``).
* ``recurring`` — ``task1``, fixed delay 0, recording (start, end, version) of every run.
* ``victim`` — recurring ``long-running`` (fixed delay 1 h): the handler reports
  ``handler_started``, then watches its heartbeat state, recording every observation, until it
  is taken over (``fraction_dead > 0.5`` and a failed heartbeat: it bails out) or the scheduler
  shuts down. It is what a SIGKILL or SIGSTOP hits.
* ``rescuer`` — knows ``long-running`` too, but its handler returns at once (recording the run).
* ``hook`` — ``register_shutdown_hook()``; one-time ``hook-task`` sleeps ``--handler-seconds``.

The parent side is :class:`SchedulerProcess`: spawn, wait for lines, send commands, kill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

CLUSTER_TASK = "Custom"
RECURRING_TASK = "task1"
LONG_TASK = "long-running"
HOOK_TASK = "hook-task"

#: ``fraction_dead`` above which a handler should assume it is being taken over (seed 001)
BAIL_OUT_FRACTION = 0.5


# =========================================================================== child side
class _Emitter:
    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, default=str)
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _build_tasks(args: argparse.Namespace, emit: _Emitter, record: dict[str, Any]) -> tuple[list, list]:
    """(known tasks, start-up tasks) of the scenario; handlers fill ``record``."""
    from ekbatan.distributed_jobs.scheduler import Schedules, Tasks

    lock = threading.Lock()

    if args.scenario == "cluster":

        class RecordResultAndRemove:
            def __init__(self, instance_id: str) -> None:
                self.instance_id = instance_id

            def complete(self, complete: Any, ops: Any) -> None:
                with lock:
                    record["ok"].append(self.instance_id)
                ops.remove()

        task = Tasks.custom(CLUSTER_TASK).execute(lambda instance, ctx: RecordResultAndRemove(instance.id))
        return [task], []

    if args.scenario == "recurring":

        def run(instance: Any, ctx: Any) -> None:
            started = time.time_ns()
            ended = time.time_ns()
            with lock:
                record["runs"].append([started, ended, ctx.execution.version])

        task = Tasks.recurring(RECURRING_TASK, Schedules.fixed_delay(timedelta(0))).execute(run)
        return [], [task]

    if args.scenario in ("victim", "rescuer"):
        victim = args.scenario == "victim"

        def long_running(instance: Any, ctx: Any) -> None:
            version = ctx.execution.version
            emit("handler_started", id=instance.id, version=version, at_ns=time.time_ns())
            if not victim:
                with lock:
                    record["runs"].append([time.time_ns(), version])
                return
            state = ctx.heartbeat_state
            while not ctx.is_shutting_down:
                # [before, fraction_dead, failed_heartbeats, after]: a SIGSTOP may land anywhere
                before = time.time_ns()
                fraction, failed = state.fraction_dead, state.failed_heartbeats
                with lock:
                    record["observations"].append([before, fraction, failed, time.time_ns()])
                if fraction > BAIL_OUT_FRACTION and failed >= 1:
                    emit("bailing_out", version=version, fraction_dead=fraction, failed_heartbeats=failed)
                    return
                time.sleep(0.02)

        task = Tasks.recurring(LONG_TASK, Schedules.fixed_delay(timedelta(hours=1))).execute(long_running)
        return ([], [task]) if victim else ([task], [])

    if args.scenario == "hook":

        def slow(instance: Any, ctx: Any) -> None:
            emit("handler_started", id=instance.id)
            time.sleep(args.handler_seconds)
            emit("handler_finished", id=instance.id)

        return [Tasks.one_time(HOOK_TASK).execute(slow)], []

    raise SystemExit(f"unknown scenario {args.scenario!r}")


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--hb-ms", type=int, default=500)
    parser.add_argument("--missed-limit", type=int, default=6)
    parser.add_argument("--shutdown-wait-ms", type=int, default=5000)
    parser.add_argument("--strategy", default="fetch", choices=["fetch", "lock_and_fetch", "default"])
    parser.add_argument("--lower", type=float, default=None)
    parser.add_argument("--upper", type=float, default=None)
    parser.add_argument("--handler-seconds", type=float, default=1.0)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s {args.name} %(threadName)s %(levelname)s %(name)s: %(message)s",
    )
    import sqlalchemy as sa

    from ekbatan.distributed_jobs.scheduler import Scheduler, SchedulerEventType, SchedulerListener

    emit = _Emitter()
    record: dict[str, Any] = {"ok": [], "failed": [], "runs": [], "observations": [], "dead": []}
    events: dict[str, int] = {}
    lock = threading.Lock()

    class Recorder(SchedulerListener):
        def on_scheduler_event(self, event: SchedulerEventType) -> None:
            with lock:
                events[event.name] = events.get(event.name, 0) + 1
            if not event.name.startswith("RAN_"):
                emit("scheduler_event", type=event.name)

        def on_execution_complete(self, complete: Any) -> None:
            if not complete.is_success:
                with lock:
                    record["failed"].append([complete.execution.instance_id, repr(complete.cause)])

        def on_execution_dead(self, execution: Any) -> None:
            with lock:
                record["dead"].append(
                    {
                        "id": execution.instance_id,
                        "picked_by": execution.picked_by,
                        "version": execution.version,
                        "last_heartbeat": execution.last_heartbeat.isoformat(),
                        "detected_ns": time.time_ns(),
                    }
                )

    known, startup = _build_tasks(args, emit, record)
    engine = sa.create_engine(args.url, pool_size=args.threads + 5, max_overflow=10)
    builder = (
        Scheduler.create(engine, *known)
        .start_tasks(*startup)
        .threads(args.threads)
        .polling_interval(timedelta(milliseconds=args.poll_ms))
        .heartbeat_interval(timedelta(milliseconds=args.hb_ms))
        .missed_heartbeats_limit(args.missed_limit)
        .shutdown_max_wait(timedelta(milliseconds=args.shutdown_wait_ms))
        .scheduler_name(args.name)
        .add_listener(Recorder())
    )
    limits = [x for x in (args.lower, args.upper) if x is not None]
    if args.strategy == "lock_and_fetch":
        builder = builder.poll_using_lock_and_fetch(*limits)
    elif args.strategy == "fetch":
        builder = builder.poll_using_fetch(*limits)
    if args.scenario == "hook":
        builder = builder.register_shutdown_hook()
    scheduler = builder.build()
    emit("built", pid=os.getpid(), sigterm=repr(signal.getsignal(signal.SIGTERM)))

    for line in sys.stdin:
        command = line.strip()
        if command == "start":
            scheduler.start()
            emit("started", sigterm=repr(signal.getsignal(signal.SIGTERM)))
        elif command == "stop":
            scheduler.stop()
            with lock:
                report = {
                    **record,
                    "events": dict(events),
                    "executing_after_stop": len(scheduler.get_currently_executing()),
                }
            emit("report", **report)
            engine.dispose()
            return 0
        elif command == "exit":
            # No stop(): whatever runs now is the shutdown hook's to finish.
            return 0
        elif command:
            emit("error", message=f"unknown command {command!r}")
    return 0


# =========================================================================== parent side
class SchedulerProcess:
    """One child scheduler; always end it with :meth:`kill` (or use :func:`scheduler_processes`)."""

    def __init__(
        self, url: str, name: str, scenario: str | None = None, *, script: Path | None = None, **options: Any
    ) -> None:
        """``script``: another node script speaking the same line protocol (default: this
        module). Options become ``--option value``; ``True`` becomes a bare ``--option``."""
        self.name = name
        argv = (
            [sys.executable, "-m", "testsupport.scheduler_process"]
            if script is None
            else [sys.executable, str(script)]
        )
        argv += ["--url", url, "--name", name]
        if scenario is not None:
            argv += ["--scenario", scenario]
        for key, value in options.items():
            flag = f"--{key.replace('_', '-')}"
            argv += [flag] if value is True else [flag, str(value)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix=f"ekbatan-{name}-")  # noqa: SIM115
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
            cwd=REPO_ROOT,
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self._lines.put(json.loads(raw))
            except json.JSONDecodeError:
                self._lines.put({"event": "garbage", "line": raw})
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self, chars: int = 4000) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-chars:]

    def expect(self, event: str, timeout: float, **match: Any) -> dict[str, Any]:
        """The next line with this ``event`` (and these field values); earlier lines are kept in
        :attr:`seen`. Fails when the child exits or the deadline passes first."""
        for line in self.seen:
            if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                self.seen.remove(line)
                return line
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"{self.name}: no {event!r} line within {timeout}s; seen {self.seen[-20:]}\n"
                    f"stderr:\n{self.stderr_tail()}"
                )
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self._lines.put(None)
                raise AssertionError(
                    f"{self.name}: exited ({self.proc.poll()}) before a {event!r} line; seen {self.seen[-20:]}\n"
                    f"stderr:\n{self.stderr_tail()}"
                )
            if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                return line
            self.seen.append(line)

    def events_seen(self, event: str) -> list[dict[str, Any]]:
        """Lines received so far (without waiting) with this ``event``."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._lines.put(None)
                break
            self.seen.append(line)
        return [line for line in self.seen if line.get("event") == event]

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def start(self, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until built, start the scheduler, wait until started."""
        self.expect("built", timeout)
        self.send("start")
        return self.expect("started", timeout)

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """Stop the scheduler and return its report (with the child's log, ``stderr``); the
        process exits."""
        self.send("stop")
        report = self.expect("report", timeout)
        self.wait(timeout)
        report["stderr"] = self.stderr_tail(10_000_000)
        return report

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s\n{self.stderr_tail()}"
            ) from None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL (resuming it first if stopped) and reap; safe to call twice."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self._reader.join(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


@contextlib.contextmanager
def scheduler_processes() -> Iterator[list[SchedulerProcess]]:
    """A list to put :class:`SchedulerProcess` objects in; every one is killed on the way out."""
    started: list[SchedulerProcess] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
