"""``flask ekbatan migrate`` and ``flask ekbatan tasks``: the ``ekbatan`` command line's own
``migrate`` and ``tasks list``, on the settings the application was initialized with, with the
same output."""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import AppGroup

from ekbatan.integrations.cli.app import Invocation, run_invocation
from ekbatan.integrations.cli.migrate_command import run_migrate
from ekbatan.integrations.cli.targets import config_target
from ekbatan.integrations.cli.tasks_command import run_list
from ekbatan.integrations.task_views import TaskFilter

__all__ = ["EXTENSION_KEY", "ekbatan_cli"]

#: where ``init_app`` registers the extension in ``app.extensions``
EXTENSION_KEY = "ekbatan"

ekbatan_cli = AppGroup("ekbatan", help="Ekbatan: framework tables and scheduled tasks.")


def _invocation() -> Invocation:
    """An invocation of the ``ekbatan`` commands on this application's settings (read once by
    ``init_app``); ``run_invocation`` closes its pools and reports a failure in one line."""
    settings = current_app.extensions[EXTENSION_KEY].settings
    return Invocation(_target=config_target(settings, f"the Flask application {current_app.name!r}"))


@ekbatan_cli.command("migrate")
def migrate_command() -> None:
    """Create or update the framework tables (eventlog, scheduled_tasks) on every shard."""
    run_invocation(_invocation(), run_migrate)


@ekbatan_cli.command("tasks")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(min=1), help="At most this many."
)
def tasks_command(limit: int) -> None:
    """List scheduled executions, the earliest due first (`ekbatan tasks` filters, shows and acts)."""
    run_invocation(_invocation(), run_list, TaskFilter(), limit)
