"""What an application defines — its task names, handlers and actions — for the commands that
compare it with what the databases hold (``doctor``, ``events status``).

Only ``--packages`` says what the application defines: they are scanned and built exactly as
``ekbatan worker`` builds them (connecting to nothing), so the task names are those a worker of
these packages runs, the event pipeline's jobs included.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from ekbatan.core.outbox import Action
from ekbatan.integrations.cli.app import Invocation
from ekbatan.integrations.cli.targets import CliError
from ekbatan.integrations.cli.worker_command import load_container
from ekbatan.integrations.runtime import build_runtime
from ekbatan.local_event_handler import EventHandlerRegistry

__all__ = ["Application", "application_options", "load_application"]


@dataclass(frozen=True)
class Application:
    packages: str
    task_names: frozenset[str]
    handlers: EventHandlerRegistry
    action_names: frozenset[str]


def application_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--packages`` and ``--container``, as ``ekbatan worker`` has them."""
    command = click.option(
        "--container",
        metavar="MODULE:NAME",
        help="Your dependency-injector container, for discovered classes' constructors (as for worker).",
    )(command)
    return click.option(
        "--packages",
        metavar="A.B,C.D",
        help="The application's packages (as for worker): what it defines is then compared with what "
        "the databases hold. Needs --config.",
    )(command)


def load_application(
    invocation: Invocation, packages: str | None, container: str | None
) -> Application | None:
    """The application of ``--packages`` built from the target's settings; None without them."""
    if not packages:
        if container:
            raise CliError("--container goes with --packages", exit_code=2)
        return None
    settings = invocation.target().settings
    if settings is None:
        raise CliError("--packages needs --config: the packages are built from its settings", exit_code=2)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's packages are usually where the command runs
    names = [name.strip() for name in packages.split(",") if name.strip()]
    runtime = build_runtime(settings, names, container=load_container(container))
    try:
        tasks = runtime.job_registry.scheduler.task_names if runtime.job_registry is not None else ()
        return Application(
            packages=",".join(names),
            task_names=frozenset(tasks),
            handlers=runtime.event_handler_registry,
            action_names=frozenset(
                cls.action_name() for cls in runtime.discovered.actions if issubclass(cls, Action)
            ),
        )
    finally:
        runtime.stop()  # closes the pools it made, never connected
