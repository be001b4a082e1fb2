"""``ekbatan demo``: the whole product on one database, three workers, one killed halfway."""

from __future__ import annotations

import click

from ekbatan.integrations.cli.app import main

__all__ = ["demo_command"]


@main.command(name="demo")
@click.option("--url", help="A PostgreSQL or MariaDB URL. Default: a SQLite file in a temporary directory.")
@click.option("--workers", type=click.IntRange(2, 8), default=3, show_default=True, help="Worker processes.")
@click.option(
    "--tasks", type=click.IntRange(1, 10_000), default=300, show_default=True, help="One-time tasks."
)
@click.option(
    "--orders", type=click.IntRange(1, 10_000), default=100, show_default=True, help="Orders placed."
)
def demo_command(url: str | None, workers: int, tasks: int, orders: int) -> None:
    """Run the demo: recurring jobs, a burst of one-time tasks, actions whose events two handlers
    receive, one worker SIGKILLed halfway, and a summary that checks every guarantee.

    Exits 0 when every guarantee held, 1 otherwise. Leaves nothing behind: the SQLite file is in
    a temporary directory; on a server the demo's tables and rows are removed at the end.
    """
    from ekbatan.integrations.demo import run_demo

    result = run_demo(url, workers=workers, tasks=tasks, orders=orders)
    raise SystemExit(0 if result.ok else 1)
