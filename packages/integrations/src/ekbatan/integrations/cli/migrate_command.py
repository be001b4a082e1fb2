"""``ekbatan migrate``: the framework tables on every shard, or on one ``--url`` database."""

from __future__ import annotations

from typing import Any

from ekbatan.core import MigrationTarget, TargetReport, migrate
from ekbatan.core.migrations import load_contributions
from ekbatan.integrations.cli.app import Invocation, ekbatan_command
from ekbatan.integrations.cli.tables import render_table

__all__ = ["migrate_command"]


@ekbatan_command(name="migrate")
def migrate_command(invocation: Invocation) -> None:
    """Create or update the framework tables (eventlog, scheduled_tasks) on every shard.

    Each shard is migrated in configuration order; versions already applied are skipped, so
    running it again is safe. With --url, only that database is migrated.
    """
    target = invocation.target()
    descriptions = {(m.component, m.version): m.description for m in load_contributions()}
    reports: list[TargetReport] = []
    for shard in target.shards:
        pool = shard.primary
        provider = invocation.open(pool, create=True)
        pool.connect(provider).close()  # one clear line when the database cannot be reached
        reports += migrate([MigrationTarget(shard.name, provider, shard.eventlog_schema, pool.config_path)])
    rows: list[dict[str, Any]] = [
        {
            "shard": report.name,
            "dialect": report.dialect.value,
            "applied": [_entry(key, descriptions) for key in report.applied],
            "already_applied": [_entry(key, descriptions) for key in report.already_applied],
        }
        for report in reports
    ]
    invocation.emit({"shards": rows}, lambda: _human(rows))


def _entry(key: tuple[str, str], descriptions: dict[tuple[str, str], str]) -> dict[str, str]:
    return {"component": key[0], "version": key[1], "description": descriptions.get(key, "")}


def _human(rows: list[dict[str, Any]]) -> str:
    table = [
        (row["shard"], row["dialect"], f"{m['component']} {m['version']}", state, m["description"])
        for row in rows
        for state, entries in (("applied", row["applied"]), ("already applied", row["already_applied"]))
        for m in entries
    ]
    applied = sum(len(row["applied"]) for row in rows)
    summary = f"{applied} migration(s) applied on {len(rows)} shard(s)"
    return render_table(("SHARD", "DIALECT", "MIGRATION", "STATUS", "DESCRIPTION"), table) + "\n" + summary
