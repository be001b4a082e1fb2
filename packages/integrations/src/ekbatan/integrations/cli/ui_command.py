"""``ekbatan ui``: the operator's web view of the scheduler, served with uvicorn; read-only
unless ``--allow-actions`` (pause/resume, retry, run now, cancel).

It builds a ``SchedulerClient`` on the jobs pool (as ``ekbatan tasks`` does) and opens each
shard's primary for the event pipeline's panel and re-drive (as ``ekbatan events`` does) —
no runtime, no scheduler, no worker: nothing it starts runs a job. ``--packages`` lists the
application's handlers before their first notification (built as ``ekbatan events status``
builds them, then closed). With ``EKBATAN_UI_USER`` and ``EKBATAN_UI_PASSWORD`` both set, every
request needs those credentials (HTTP basic authentication; 401 otherwise). ``EKBATAN_UI_SECRET``
is the key of the action forms' CSRF tokens: give every replica behind a load balancer the same
one (default: a random one per process). Starlette, Jinja2
and uvicorn (the ``ui`` extra) are imported when the command runs, so the other commands
work without them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from ekbatan.integrations.cli.app import Invocation, ekbatan_command, main
from ekbatan.integrations.cli.application import application_options, load_application
from ekbatan.integrations.cli.targets import CliError
from ekbatan.integrations.cli.tasks_command import scheduler_client

if TYPE_CHECKING:
    from ekbatan.integrations.operator.eventlog_shards import EventlogShards

__all__ = ["ui_command"]

USER_VARIABLE, PASSWORD_VARIABLE = "EKBATAN_UI_USER", "EKBATAN_UI_PASSWORD"
SECRET_VARIABLE = "EKBATAN_UI_SECRET"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8089


@ekbatan_command(main, "ui")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="The address to listen on.")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="The port."
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer the actions (pause/resume, retry dead, run now, cancel; each confirmed). Default: read-only.",
)
@click.option(
    "--live",
    type=click.Choice(["auto", "sse", "poll", "off"]),
    default="auto",
    show_default=True,
    help="How open pages refresh: auto (a stream on PostgreSQL, polling elsewhere), sse, poll, off.",
)
@click.option(
    "--refresh-interval",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Seconds between refreshes when nothing notifies.",
)
@application_options
def ui_command(
    invocation: Invocation,
    host: str,
    port: int,
    allow_actions: bool,
    live: str,
    refresh_interval: float,
    packages: str | None,
    container: str | None,
) -> None:
    """Serve the operator's web view of scheduled executions (overview, listing, details and
    history) and of the event pipeline of every shard, read-only unless --allow-actions
    (which re-drives failed and expired notifications too). Basic authentication when EKBATAN_UI_USER and
    EKBATAN_UI_PASSWORD are set; EKBATAN_UI_SECRET (16 bytes or more) shares the forms' CSRF key
    between replicas."""
    user, password = os.environ.get(USER_VARIABLE) or None, os.environ.get(PASSWORD_VARIABLE) or None
    if (user is None) != (password is None):
        raise CliError(
            f"set both {USER_VARIABLE} and {PASSWORD_VARIABLE} for basic authentication, or neither"
        )
    try:
        import uvicorn

        from ekbatan.integrations.operator import BasicAuth, operator_app
        from ekbatan.integrations.operator.csrf import Csrf
    except ImportError as error:
        raise CliError(
            f"ekbatan ui needs the ui extra ({error.name} is missing): pip install 'ekbatan-integrations[ui]'"
        ) from None
    secret = os.environ.get(SECRET_VARIABLE) or None
    if secret is not None:
        try:
            Csrf(secret)  # checked before connecting: a short one is refused at once
        except ValueError as error:  # its message gives the length, never the secret
            raise CliError(f"{SECRET_VARIABLE}: {error}") from None
    application = load_application(invocation, packages, container)
    handler_names = application.handlers.handler_names() if application is not None else ()
    client = scheduler_client(invocation, companions=allow_actions)
    eventlog = open_eventlog_shards(invocation, handler_names)
    app: Any = operator_app(
        client,
        read_only=not allow_actions,
        csrf_secret=secret,
        live=live,
        refresh_interval=refresh_interval,
        eventlog=eventlog,
    )
    if user is not None and password is not None:
        app = BasicAuth(app, user, password)
    note = "no authentication" if user is None else f"basic authentication as {user}"
    if allow_actions and secret is not None:
        note += f"; the forms' CSRF key from {SECRET_VARIABLE}"
    note += f"; the event pipeline of {len(eventlog.shards)} shard(s)"
    click.echo(
        f"ekbatan ui: serving the {'operator view with actions' if allow_actions else 'read-only operator view'} at http://{host}:{port}/ ({note}); Ctrl-C stops",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning" if invocation.as_json else "info")


def open_eventlog_shards(invocation: Invocation, handler_names: tuple[str, ...]) -> EventlogShards:
    """Every shard of the target, on its primary's pool (closed when the command ends).

    Nothing is connected here: a shard without eventlog tables, or not answering, is left out
    of the page when it is read. A SQLite shard whose file is not there is left out now, with a
    warning, because connecting would create an empty file where a typo in the path was meant.
    """
    from ekbatan.integrations.operator.eventlog_shards import EventlogShard, EventlogShards

    shards = []
    for shard in invocation.target().shards:
        try:
            provider = invocation.open(shard.primary)
        except CliError as missing:
            click.echo(f"ekbatan ui: no event pipeline for shard {shard.name}: {missing}", err=True)
            continue
        shards.append(
            EventlogShard(shard.name, shard.primary.dialect, shard.eventlog_schema, provider.engine)
        )
    return EventlogShards(tuple(shards), handler_names)
