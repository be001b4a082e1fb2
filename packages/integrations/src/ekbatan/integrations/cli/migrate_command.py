"""``ekbatan migrate``: the framework tables on every shard, or on one ``--url`` database."""

from __future__ import annotations

from typing import Any

from ekbatan.core import MigrationTarget, TargetReport, migrate
from ekbatan.core.migrations import load_contributions
from ekbatan.integrations.cli.app import Invocation, ekbatan_command
from ekbatan.integrations.cli.tables import render_table

__all__ = ["migrate_command", "run_migrate"]


@ekbatan_command(name="migrate")
def migrate_command(invocation: Invocation) -> None:
    """Create or update the framework tables (eventlog, scheduled_tasks) on every shard.

    Each shard is migrated in configuration order; versions already applied are skipped, so
    running it again is safe. With --url, only that database is migrated.
    """
    run_migrate(invocation)


def run_migrate(invocation: Invocation) -> None:
    """The command itself, for any entry point that has an invocation (``flask ekbatan migrate``)."""
    target = invocation.target()
    migrations = {(m.component, m.version): m for m in load_contributions()}
    reports: list[tuple[TargetReport, str]] = []
    for shard in target.shards:
        pool = shard.primary
        provider = invocation.open(pool, create=True)
        pool.connect(provider).close()  # one clear line when the database cannot be reached
        for report in migrate(
            [MigrationTarget(shard.name, provider, shard.eventlog_schema, pool.config_path)]
        ):
            reports.append((report, shard.eventlog_schema))
    rows: list[dict[str, Any]] = []
    for report, eventlog_schema in reports:

        def entry(
            key: tuple[str, str], report: TargetReport = report, schema: str = eventlog_schema
        ) -> dict[str, Any]:
            migration = migrations.get(key)
            # a version with no statements for this dialect (e.g. an index other dialects have
            # had from the start) is recorded, so that it is not pending, but changes nothing here
            here = migration is None or bool(migration.statements_for(report.dialect, eventlog_schema=schema))
            description = migration.description if migration is not None else ""
            return {
                "component": key[0],
                "version": key[1],
                "description": description,
                "on_this_dialect": here,
            }

        rows.append(
            {
                "shard": report.name,
                "dialect": report.dialect.value,
                "applied": [entry(key) for key in report.applied],
                "already_applied": [entry(key) for key in report.already_applied],
                "reapplied": [entry(key) for key in report.reapplied],
            }
        )
    invocation.emit({"shards": rows}, lambda: _human(rows))


_STATES = (
    ("applied", "applied"),
    ("already_applied", "already applied"),
    ("reapplied", "re-applied"),
)


def _human(rows: list[dict[str, Any]]) -> str:
    table = [
        (
            row["shard"],
            row["dialect"],
            f"{m['component']} {m['version']}",
            state if m["on_this_dialect"] else f"not on {row['dialect']}",
            m["description"],
        )
        for row in rows
        for key, state in _STATES
        for m in row[key]
    ]
    applied = sum(1 for row in rows for m in row["applied"] if m["on_this_dialect"])
    reapplied = sum(len(row["reapplied"]) for row in rows)
    summary = f"{applied} migration(s) applied on {len(rows)} shard(s)"
    if reapplied:
        summary += f"; {reapplied} re-applied: recorded as applied, but a table they create was missing"
    return render_table(("SHARD", "DIALECT", "MIGRATION", "STATUS", "DESCRIPTION"), table) + "\n" + summary
