"""``ekbatan worker``: a standalone process running an application's jobs and event pipeline.

It scans the packages and builds the graph with :func:`~ekbatan.integrations.build_runtime`,
exactly as the framework integrations do, starts it, and runs until SIGTERM or SIGINT; then it
stops the job registry (running executions drain for up to ``shutdown-max-wait``, picked rows
are released) and closes the pools, and exits 0.

What to build is an :class:`~ekbatan.integrations.options.EkbatanOptions`: ``--options
MODULE:NAME`` names one (or a function of no argument returning one) for what has no flag —
``clock``, ``codec``, ``extra_jobs``, ``extra_handlers``, ``extra_tasks``,
``customize_scheduler`` — and ``--config``, ``--packages``, ``--container``, ``--migrate`` and
``--wait-for-database``, when given, win over its fields.

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
from typing import Any

import click
import sqlalchemy as sa

from ekbatan.core import EkbatanSettings
from ekbatan.distributed_jobs import JobsDatabaseUnavailableError, StopSignals
from ekbatan.integrations.cli.app import EXIT_USAGE, Invocation, ekbatan_command
from ekbatan.integrations.cli.targets import CliError, Target, config_target, first_line
from ekbatan.integrations.metrics_exposition import MetricsServer, serve_metrics
from ekbatan.integrations.options import EkbatanOptions
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime

__all__ = ["worker_command"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


OPTIONS_FIX = (
    "write MODULE:NAME naming an EkbatanOptions, or a function of no argument returning one, "
    "e.g. shop.worker:OPTIONS"
)


def _load_attribute(option: str, spec: str, example: str) -> Any:
    """``module:name`` → what ``name`` is in that module, imported from the working directory."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{spec!r}: write MODULE:NAME, e.g. {example}", param_hint=option)
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise CliError(f"{option} {spec}: cannot load it: {error}") from None


def load_container(spec: str | None) -> Any:
    """``module:name`` → the dependency-injector container there (a class is instantiated)."""
    if not spec:
        return None
    found = _load_attribute("--container", spec, "myapp.containers:AppContainer")
    return found() if isinstance(found, type) else found


def load_options(spec: str | None) -> EkbatanOptions:
    """``module:name`` → the :class:`EkbatanOptions` there, or what the function there returns.

    A value that is not one is a usage error (exit 2) naming it and what to write instead."""
    if not spec:
        return EkbatanOptions()
    try:
        found = _load_attribute("--options", spec, "shop.worker:OPTIONS")
    except click.BadParameter as error:
        raise CliError(f"--options {spec!r}: {OPTIONS_FIX}", exit_code=EXIT_USAGE) from error
    except CliError as error:
        raise CliError(f"{error}; {OPTIONS_FIX}", exit_code=EXIT_USAGE) from None
    if isinstance(found, EkbatanOptions):
        return found
    if isinstance(found, type) and not issubclass(found, EkbatanOptions):
        # calling it would only fail on its own arguments, or build something else
        raise CliError(
            f"--options {spec} is the class {found.__module__}.{found.__qualname__}, not an EkbatanOptions; "
            f"{OPTIONS_FIX}",
            exit_code=EXIT_USAGE,
        )
    if not callable(found):
        raise CliError(f"--options {spec} is {found!r}; {OPTIONS_FIX}", exit_code=EXIT_USAGE)
    try:
        made = found()
    except Exception as error:
        raise CliError(f"--options {spec}: calling it failed: {first_line(error)}") from error
    if not isinstance(made, EkbatanOptions):
        raise CliError(
            f"--options {spec} returned {_short_repr(made)}, not an EkbatanOptions; {OPTIONS_FIX}",
            exit_code=EXIT_USAGE,
        )
    return made


def _short_repr(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:79] + "…"


@ekbatan_command(name="worker", url=False)
@click.option(
    "--packages",
    metavar="A.B,C.D",
    help="Comma-separated packages to scan for @distributed_job, @event_handler and @action "
    "(the current directory is on the import path). Required unless --options gives packages.",
)
@click.option(
    "--options",
    "options_spec",
    metavar="MODULE:NAME",
    help="An EkbatanOptions (or a function of no argument returning one) for what has no flag: "
    "clock, codec, extra_jobs, extra_handlers, extra_tasks, customize_scheduler. Flags given win "
    "over its fields.",
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
    "--metrics-port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Serve the metrics in Prometheus' format at http://HOST:PORT/metrics (0: any free port); "
    "turns ekbatan.observability.metrics on. Default: ekbatan.observability.metrics-port, else not served.",
)
@click.option(
    "--metrics-host",
    metavar="HOST",
    help="The address --metrics-port binds (default: ekbatan.observability.metrics-host, 127.0.0.1); "
    "0.0.0.0 for every interface, e.g. in a container.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def worker_command(
    invocation: Invocation,
    packages: str | None,
    options_spec: str | None,
    container: str | None,
    migrate: bool,
    wait_for_database: bool,
    metrics_port: int | None,
    metrics_host: str | None,
    log_level: str,
) -> None:
    """Run the application's jobs and event handlers until SIGTERM or SIGINT."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's packages are usually where the command runs
    given = load_options(options_spec)
    # A flag left out keeps what --options says (None is "not given" to EkbatanOptions.of).
    opts = EkbatanOptions.of(
        given,
        packages=packages,
        container=load_container(container),
        migrate_on_start=True if migrate else None,
        require_database=False if wait_for_database else None,
    )
    if not opts.packages and not (opts.extra_jobs or opts.extra_handlers or opts.extra_tasks):
        raise click.BadParameter(
            "name at least one package (or give jobs with --options)", param_hint="--packages"
        )
    if opts.migrate_on_start and not opts.require_database:
        raise click.BadParameter(
            "migrations need the database at start-up: run 'ekbatan migrate' first, then the worker "
            "with --wait-for-database, or drop --wait-for-database",
            param_hint="--migrate/--wait-for-database",
        )
    target = _target(invocation, given)
    settings = _with_metrics_flags(target.settings, metrics_port, metrics_host)
    runtime = build_runtime(options=opts.replace(config=settings))
    invocation.resources.callback(runtime.stop)
    if runtime.job_registry is None:
        names = ", ".join(p if isinstance(p, str) else p.__name__ for p in opts.packages)
        raise CliError(
            f"nothing to run: no @distributed_job, @event_handler or task found in {names or 'no package'}; "
            f"check --packages"
        )
    migrate, wait_for_database = opts.migrate_on_start, not opts.require_database
    handlers = list(dict.fromkeys(runtime.event_handler_registry.handler_names()))
    _check_databases(invocation, target, handlers=bool(handlers), migrate=migrate, wait=wait_for_database)
    # Logging starts only now, so that a worker refused before it starts prints one line.
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    metrics = _serve_metrics(invocation, runtime)
    with StopSignals(STOP_SIGNALS) as stop:
        try:
            runtime.start()
        except JobsDatabaseUnavailableError as error:
            raise CliError(_command_line_fix(first_line(error))) from error
        jobs = [job.name() for job in runtime.jobs]
        tasks = [task.name for task in runtime.tasks]
        named_tasks = f" ({', '.join(tasks)})" if tasks else ""
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
                "tasks": tasks,
                "handlers": handlers,
                "handling_enabled": handling,
                "jobs_pool": pool.url,
                "waiting_for_database": waiting,
                "metrics_url": None if metrics is None else metrics.url,
            },
            f"ekbatan worker {os.getpid()}: {len(jobs)} job(s) ({', '.join(jobs)}), "
            f"{len(tasks)} task(s){named_tasks}, "
            f"{_handlers_text(handlers, handling)}, jobs pool {pool.url}"
            f"{' (waiting for its database)' if waiting else ''}"
            f"{'' if metrics is None else f'; metrics at {metrics.url}'}; stop it with SIGTERM or Ctrl-C",
        )
        received = stop.wait()
    # the handlers are restored first, so that a second signal during a long drain stops the process
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
        {"event": "stopped", "signal": received.name, "abandoned": abandoned},
        f"ekbatan worker {os.getpid()}: {received.name} received; {outcome}",
    )


def _with_metrics_flags(
    settings: EkbatanSettings | None, port: int | None, host: str | None
) -> EkbatanSettings | None:
    """``--metrics-port``/``--metrics-host`` over ``ekbatan.observability``: a port given turns
    the metrics on, served in Prometheus' format (the flag says so, whatever the file says)."""
    if settings is None:  # a URL target, which the worker refuses anyway
        return settings
    observability = settings.observability
    changes: dict[str, Any] = {}
    if port is not None:
        changes.update(metrics=True, prometheus=True, metrics_port=port)
    if host is not None:
        changes["metrics_host"] = host
    if not changes:
        return settings
    return settings.model_copy(update={"observability": observability.model_copy(update=changes)})


def _serve_metrics(invocation: Invocation, runtime: EkbatanRuntime) -> MetricsServer | None:
    """``/metrics`` on ``ekbatan.observability.metrics-port`` (None when no port is set); closed
    with the worker. A port already taken is refused in one line, before anything starts."""
    observability = runtime.settings.observability
    if observability.metrics_port is None:
        return None
    if runtime.metrics_registry is None:
        raise CliError(
            f"ekbatan.observability.metrics-port is {observability.metrics_port} but the metrics are not "
            "served in Prometheus' format: set ekbatan.observability.metrics: true (and prometheus: true), "
            "or pass --metrics-port"
        )
    try:
        server = serve_metrics(
            runtime.metrics_registry, observability.metrics_host, observability.metrics_port
        )
    except OSError as error:
        where = f"{observability.metrics_host}:{observability.metrics_port}"
        raise CliError(
            f"cannot serve the metrics on {where}: {error.strerror or error}; pick another --metrics-port "
            "(0 picks a free one)"
        ) from None
    invocation.resources.callback(server.close)
    return server


def _target(invocation: Invocation, given: EkbatanOptions) -> Target:
    """The databases of ``--config`` (or ``$EKBATAN_CONFIG``), else of the options' ``config``."""
    if invocation.config is None:
        if isinstance(given.config, EkbatanSettings):
            return config_target(given.config, "the settings of --options")
        if given.config is not None:
            invocation.config = os.fspath(given.config)
    return invocation.target()


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
