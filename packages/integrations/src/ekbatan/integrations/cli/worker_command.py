"""``ekbatan worker``: a standalone process running an application's jobs and event pipeline.

It scans the packages and builds the graph with :func:`~ekbatan.integrations.build_runtime`,
exactly as the framework integrations do, starts it, and runs until SIGTERM or SIGINT; then it
stops the job registry (running executions drain for up to ``shutdown-max-wait``, picked rows
are released) and closes the pools, and exits 0.

By default it exits 1 at once, naming the jobs pool, when the jobs database cannot be reached;
``--wait-for-database`` starts it degraded instead: it keeps retrying in the background and the
jobs begin when the database answers (for a worker started before its database, e.g. by a
container orchestrator that starts both at once).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import time
from typing import Any

import click
import sqlalchemy as sa

from ekbatan.distributed_jobs import JobsDatabaseUnavailableError
from ekbatan.integrations.cli.app import Invocation, ekbatan_command
from ekbatan.integrations.cli.targets import CliError, Target, first_line
from ekbatan.integrations.runtime import build_runtime

__all__ = ["worker_command"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def load_container(spec: str | None) -> Any:
    """``module:name`` → the dependency-injector container there (a class is instantiated)."""
    if not spec:
        return None
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{spec!r}: write MODULE:NAME, e.g. myapp.containers:AppContainer")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise CliError(f"--container {spec}: cannot load it: {error}") from None
    return found() if isinstance(found, type) else found


@ekbatan_command(name="worker", url=False)
@click.option(
    "--packages",
    required=True,
    metavar="A.B,C.D",
    help="Comma-separated packages to scan for @distributed_job, @event_handler and @action "
    "(the current directory is on the import path).",
)
@click.option(
    "--container",
    metavar="MODULE:NAME",
    help="Your dependency-injector container, whose providers discovered classes' constructors get.",
)
@click.option("--migrate", is_flag=True, help="Run the framework migrations before starting.")
@click.option(
    "--wait-for-database",
    is_flag=True,
    help="Start even when the jobs database cannot be reached, and keep retrying until it answers "
    "(default: exit 1 at once, naming the pool). Not with --migrate, which needs the database.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def worker_command(
    invocation: Invocation,
    packages: str,
    container: str | None,
    migrate: bool,
    wait_for_database: bool,
    log_level: str,
) -> None:
    """Run the application's jobs and event handlers until SIGTERM or SIGINT."""
    names = [name.strip() for name in packages.split(",") if name.strip()]
    if not names:
        raise click.BadParameter("name at least one package", param_hint="--packages")
    if migrate and wait_for_database:
        raise click.BadParameter(
            "migrations need the database at start-up: run 'ekbatan migrate' first, then the worker "
            "with --wait-for-database, or drop --wait-for-database",
            param_hint="--migrate/--wait-for-database",
        )
    target = invocation.target()
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's packages are usually where the command runs
    runtime = build_runtime(
        target.settings,
        names,
        container=load_container(container),
        migrate_on_start=migrate,
        require_database=not wait_for_database,
    )
    invocation.resources.callback(runtime.stop)
    if runtime.job_registry is None:
        raise CliError(
            f"nothing to run: no @distributed_job or @event_handler found in {', '.join(names)}; "
            f"check --packages"
        )
    handlers = list(dict.fromkeys(runtime.event_handler_registry.handler_names()))
    _check_databases(invocation, target, handlers=bool(handlers), migrate=migrate, wait=wait_for_database)
    # Logging starts only now, so that a worker refused before it starts prints one line.
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    received: list[signal.Signals] = []

    def note(signum: int, _frame: object) -> None:
        # Only record it: the handler may interrupt the main thread inside a lock.
        received.append(signal.Signals(signum))

    previous = {sig: signal.signal(sig, note) for sig in STOP_SIGNALS}
    try:
        try:
            runtime.start()
        except JobsDatabaseUnavailableError as error:
            raise CliError(_command_line_fix(first_line(error))) from error
        jobs = [job.name() for job in runtime.jobs]
        handling = runtime.settings.local_event_handler.handling.enabled
        pool = target.jobs
        # a degraded start leaves the jobs' rows to write once the database answers
        waiting = bool(runtime.job_registry.scheduler.startup_tasks_waiting_for_database)
        _say(
            invocation,
            {
                "event": "started",
                "pid": os.getpid(),
                "jobs": jobs,
                "handlers": handlers,
                "handling_enabled": handling,
                "jobs_pool": pool.url,
                "waiting_for_database": waiting,
            },
            f"ekbatan worker {os.getpid()}: {len(jobs)} job(s) ({', '.join(jobs)}), "
            f"{_handlers_text(handlers, handling)}, jobs pool {pool.url}"
            f"{' (waiting for its database)' if waiting else ''}; stop it with SIGTERM or Ctrl-C",
        )
        while not received:
            time.sleep(0.05)
    finally:
        # Restored first, so that a second signal during a long drain stops the process.
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    runtime.stop()
    # Executions still running after the shutdown waits stay registered (their threads are
    # abandoned, their rows stay picked until another worker revives them).
    abandoned = len(runtime.job_registry.scheduler.registry.snapshot())
    outcome = (
        f"stopped; {abandoned} execution(s) abandoned, their rows stay picked until another worker revives "
        f"them once their heartbeat is older than the dead window"
        if abandoned
        else "stopped cleanly"
    )
    _say(
        invocation,
        {"event": "stopped", "signal": received[0].name, "abandoned": abandoned},
        f"ekbatan worker {os.getpid()}: {received[0].name} received; {outcome}",
    )


def _handlers_text(handlers: list[str], handling: bool) -> str:
    listed = f"{len(handlers)} handler(s)" + (f" ({', '.join(handlers)})" if handlers else "")
    if handlers and not handling:
        # the fan-out runs, but no handler is called here: easy to miss when testing one worker
        return (
            f"{listed}, not run in this process: ekbatan.local-event-handler.handling.enabled is false "
            f"(events are fanned out; a worker with it true handles them)"
        )
    return listed


def _command_line_fix(message: str) -> str:
    """The engine's advice names its Python API; on the command line the option is the fix."""
    api = "start(require_database=False) starts anyway and waits for it"
    option = "or run the worker with --wait-for-database to start anyway and wait for it"
    return message.replace(api, option) if api in message else f"{message}; {option}"


def _check_databases(
    invocation: Invocation, target: Target, *, handlers: bool, migrate: bool, wait: bool
) -> None:
    """Refuse to start, in one line, on an unreachable jobs database or missing framework tables.

    Started anyway, the scheduler's threads would log a traceback per failing query before the
    start-up check gives up with an error about registration rather than the missing table.
    """
    pool = target.jobs
    provider = invocation.open(pool, create=migrate)
    try:
        connection = provider.connect()
    except sa.exc.DBAPIError as error:
        if wait:
            return  # --wait-for-database: the scheduler retries until it answers
        raise CliError(_command_line_fix(str(pool.unreachable(error)))) from None
    with connection:
        if not migrate:
            target.require_scheduled_tasks(connection)
    if migrate or not handlers:
        return
    for shard in target.shards:
        with shard.primary.connect(invocation.open(shard.primary)) as connection:
            target.require_eventlog(connection, shard)


def _say(invocation: Invocation, data: dict[str, Any], text: str) -> None:
    # One line per event, so that a supervisor or a script can follow the worker's output.
    click.echo(json.dumps(data) if invocation.as_json else text)
