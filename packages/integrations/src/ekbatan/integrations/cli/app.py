"""The ``ekbatan`` click group, the options every command shares, and how errors are reported.

A command module defines its command with :func:`ekbatan_command` (or adds a click group to
:data:`main` with ``main.add_command``); the decorator adds ``--config``/``--url``/
``--eventlog-schema`` (when the command works on databases), ``--json`` and ``--debug``, and
turns any exception into one line on stderr and an exit code:

* 0 — done, every check passed;
* 1 — a check failed, an operation was refused, or the work could not be done (bad
  configuration, unreachable database, missing tables);
* 2 — the command line is wrong (click's usage errors).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import Token
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider, JobsPoolNotConfiguredError, MigrationError, SettingsError
from ekbatan.distributed_jobs.scheduler import (
    ExecutionError,
    HoldError,
    TaskInstanceCurrentlyExecutingError,
    TaskInstanceNotFoundError,
)
from ekbatan.integrations.cli.tables import TABLE_WIDTH
from ekbatan.integrations.cli.targets import CliError, Pool, Target, first_line, resolve_target
from ekbatan.integrations.construction import ConstructionError
from ekbatan.integrations.discovery import DiscoveryError
from ekbatan.integrations.task_views import TaskPickedError

__all__ = ["Invocation", "ekbatan_command", "main", "run_invocation"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: the end of the engine's missing jobs-config error that concerns only its Python API
JOBS_POOL_API_FIX = ", or pass your own ConnectionProvider to the JobRegistry"


def _json_error(message: str, code: int) -> NoReturn:
    """With ``--json`` an error is one JSON object on stderr, for a script to parse."""
    click.echo(json.dumps({"error": message, "exit": code}), err=True)
    raise SystemExit(code)


def _usage_line(error: click.ClickException, fallback: str) -> str:
    """click's error as one line: ``<message> (see 'ekbatan worker --help')`` for a usage error."""
    message = " ".join(error.format_message().split())
    if not isinstance(error, click.UsageError):
        return message
    path = error.ctx.command_path if error.ctx is not None else fallback
    return f"{message.rstrip('.')} (see '{path} --help')"


class _Group(click.Group):
    """click's group, except that click's own errors (a usage error, an unknown option) are one
    line too: ``error: …`` on stderr rather than click's usage text, or with ``--json`` on the
    command line a JSON object."""

    def main(self, args: Any = None, *pargs: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(args, *pargs, **kwargs)
        argv = list(sys.argv[1:] if args is None else args)
        wants_json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        kwargs["standalone_mode"] = False
        try:
            returned = super().main(args, *pargs, **kwargs)
        except click.exceptions.NoArgsIsHelpError as error:
            if not wants_json:
                error.show()  # the help itself, as click prints it: no line could replace it
                raise SystemExit(error.exit_code) from None
            _json_error(" ".join(error.format_message().split()), error.exit_code)
        except click.ClickException as error:
            if wants_json:
                _json_error(" ".join(error.format_message().split()), error.exit_code)
            click.echo(f"error: {_usage_line(error, kwargs.get('prog_name') or 'ekbatan')}", err=True)
            raise SystemExit(error.exit_code) from None
        except click.Abort:
            if wants_json:
                _json_error("aborted", EXIT_FAILED)
            click.echo("error: aborted", err=True)
            raise SystemExit(EXIT_FAILED) from None
        # what standalone mode does: a command's return value is not an exit code, Exit's is
        raise SystemExit(returned if isinstance(returned, int) else EXIT_OK)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Operate Ekbatan: framework tables, a standalone worker, scheduled tasks, the outbox's
    event pipeline and a health check, on the databases of an application.yml (or one --url).

    Exit codes: 0 ok, 1 a check failed or an operation was refused or could not be done,
    2 usage error. --json prints machine-readable output; --debug shows tracebacks.
    """


@dataclass
class Invocation:
    """What a command gets: its shared options, its target, output helpers and cleanup."""

    config: str | None = None
    url: str | None = None
    eventlog_schema: str | None = None
    as_json: bool = False
    debug: bool = False
    resources: ExitStack = field(default_factory=ExitStack)
    _target: Target | None = None

    def target(self) -> Target:
        if self._target is None:
            self._target = resolve_target(self.config, self.url, self.eventlog_schema)
        return self._target

    def open(self, pool: Pool, *, create: bool = False) -> ConnectionProvider:
        """A provider for ``pool``, closed when the command ends."""
        provider = pool.open(create=create)
        self.resources.callback(provider.close)
        return provider

    def emit(self, data: Any, human: Callable[[], str] | str) -> None:
        """``data`` as JSON with ``--json``, else the text for people."""
        if self.as_json:
            click.echo(json.dumps(data, indent=2, default=str))
        else:
            click.echo(human() if callable(human) else human)


def describe(error: BaseException) -> str:
    """One line with the cause and, where there is one, the fix."""
    if isinstance(error, SettingsError):
        problems = "; ".join(f"{path}: {' '.join(message.split())}" for path, message in error.problems)
        return f"invalid Ekbatan settings in {error.source}: {problems}"
    if isinstance(error, TaskPickedError):
        return (
            f"refused: {error}. Wait for it to finish, or pass --force (its running execution then "
            f"cannot record its result)"
        )
    if isinstance(error, JobsPoolNotConfiguredError):
        # the engine's advice for its Python API; on the command line the configuration is the fix
        return first_line(error).replace(JOBS_POOL_API_FIX, "")
    if isinstance(error, ExecutionError):
        return f"{first_line(error)}; look at it again with ekbatan tasks show and retry"
    if isinstance(
        error,
        (
            CliError,
            MigrationError,
            DiscoveryError,
            ConstructionError,
            TaskInstanceNotFoundError,
            TaskInstanceCurrentlyExecutingError,
            HoldError,
        ),
    ):
        return first_line(error)
    if isinstance(error, sa.exc.DBAPIError):
        return f"database error: {first_line(error.orig or error)}"
    return f"{type(error).__name__}: {first_line(error)} (--debug shows the traceback)"


@contextmanager
def _resetting(token: Token[int]) -> Iterator[None]:
    try:
        yield
    finally:
        TABLE_WIDTH.reset(token)


def _fail(invocation: Invocation, error: BaseException) -> NoReturn:
    if invocation.debug:
        traceback.print_exception(error, file=sys.stderr)
    code = error.exit_code if isinstance(error, CliError) else EXIT_FAILED
    if invocation.as_json:
        _json_error(describe(error), code)
    click.echo(f"error: {describe(error)}", err=True)
    raise SystemExit(code)


def run_invocation(invocation: Invocation, fn: Callable[..., Any], *args: Any, **options: Any) -> None:
    """``fn(invocation, *args, **options)`` as every command runs: its resources closed at the end,
    a failure reported in one line (``error: …``, or JSON with ``--json``) with its exit code."""
    with invocation.resources:
        try:
            fn(invocation, *args, **options)
        except click.UsageError as error:
            # raised by the command: the context names the command for "see … --help"
            error.ctx = error.ctx or click.get_current_context(silent=True)
            raise
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as error:
            if isinstance(error, CliError) and error.exit_code == EXIT_USAGE:
                raise click.UsageError(str(error), ctx=click.get_current_context(silent=True)) from None
            _fail(invocation, error)


def ekbatan_command(
    parent: click.Group = main, name: str | None = None, *, databases: bool = True, url: bool = True
) -> Callable[[Callable[..., Any]], click.Command]:
    """Register ``fn(invocation, **options)`` as a command of ``parent`` with the shared options.

    ``databases=False`` leaves out ``--config``/``--url``; ``url=False`` only ``--url``.
    """

    def decorate(fn: Callable[..., Any]) -> click.Command:
        @functools.wraps(fn)
        def command(**options: Any) -> None:
            # --wide: this command's tables print every character (reset after, for callers
            # that run several commands in one process)
            width = TABLE_WIDTH.set(0 if options.pop("wide") else TABLE_WIDTH.get())
            invocation = Invocation(
                config=options.pop("config", None),
                url=options.pop("url", None),
                eventlog_schema=options.pop("eventlog_schema", None),
                as_json=options.pop("as_json"),
                debug=options.pop("debug"),
            )
            if invocation.debug:
                logging.basicConfig(level=logging.DEBUG)
            with _resetting(width):
                run_invocation(invocation, fn, **options)

        decorated: Callable[..., Any] = command
        decorated = click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")(decorated)
        decorated = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(decorated)
        decorated = click.option(
            "--wide",
            is_flag=True,
            help="Print tables whole (default: fit 100 columns, long values cut with …).",
        )(decorated)
        if databases:
            if url:
                decorated = click.option(
                    "--eventlog-schema",
                    metavar="NAME",
                    help="With --url: the eventlog schema (MySQL/MariaDB: database; SQLite: table prefix). "
                    "Default: eventlog.",
                )(decorated)
                decorated = click.option(
                    "--url", metavar="URL", help="One database (a SQLAlchemy URL) instead of a configuration."
                )(decorated)
            decorated = click.option(
                "--config",
                metavar="PATH",
                envvar="EKBATAN_CONFIG",
                show_envvar=True,
                help="The application.yml (default: ./application.yml when it exists).",
            )(decorated)
        return parent.command(name)(decorated)

    return decorate
