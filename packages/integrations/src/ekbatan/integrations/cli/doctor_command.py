"""``ekbatan doctor``: what is wrong with a deployment, one pass/warn/fail line per finding.

Checks the configuration, every configured pool of every member (it connects and logs in), the
framework tables and their columns on every shard (``events`` and ``event_notifications`` under
the member's eventlog name on its primary; ``scheduled_tasks`` on the jobs pool's database), and
the clock offset between this machine and each database: the dead-execution window (heartbeat
interval × missed heartbeats) compares a row's ``last_heartbeat``, written with one instance's
clock, against another instance's clock, so clocks apart by more than a second are a warning.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC

import sqlalchemy as sa

from ekbatan.core import DialectName, SettingsError
from ekbatan.core.migrations import eventlog_tables
from ekbatan.distributed_jobs.scheduler._rows import COLUMNS as SCHEDULED_TASKS_COLUMNS
from ekbatan.distributed_jobs.scheduler.schema import DEFAULT_TABLE_NAME
from ekbatan.integrations.cli.app import EXIT_FAILED, Invocation, describe, ekbatan_command
from ekbatan.integrations.cli.tables import render_table
from ekbatan.integrations.cli.targets import CliError, Pool, Shard, Target

__all__ = ["Check", "doctor_command"]

PASS, WARN, FAIL = "pass", "warn", "fail"
#: clocks further apart than this (beyond the measurement's own uncertainty) are a warning
CLOCK_TOLERANCE_SECONDS = 1.0

_SERVER_NOW = {
    DialectName.POSTGRESQL: "SELECT CAST(now() AT TIME ZONE 'UTC' AS timestamp)",
    DialectName.MARIADB: "SELECT UTC_TIMESTAMP(6)",
    DialectName.MYSQL: "SELECT UTC_TIMESTAMP(6)",
}


@dataclass(frozen=True)
class Check:
    status: str
    check: str
    target: str
    detail: str


@ekbatan_command(name="doctor")
def doctor_command(invocation: Invocation) -> None:
    """Check the configuration, every pool, the framework tables and the clocks."""
    checks: list[Check] = []
    try:
        target = invocation.target()
    except (SettingsError, CliError) as error:
        checks.append(Check(FAIL, "configuration", invocation.config or "application.yml", describe(error)))
        _report(invocation, checks)
        return
    checks.append(_configuration(target))
    for shard in target.shards:
        for pool in shard.pools:
            checks += _pool_checks(invocation, target, shard, pool)
    _report(invocation, checks)


def _report(invocation: Invocation, checks: list[Check]) -> None:
    failed = any(c.status == FAIL for c in checks)
    data = {"ok": not failed, "checks": [asdict(c) for c in checks]}
    counts = {s: sum(1 for c in checks if c.status == s) for s in (PASS, WARN, FAIL)}
    summary = f"{counts[PASS]} passed, {counts[WARN]} warning(s), {counts[FAIL]} failed"
    invocation.emit(
        data,
        lambda: (
            render_table(("STATUS", "CHECK", "TARGET", "DETAIL"), [tuple(asdict(c).values()) for c in checks])
            + "\n"
            + summary
        ),
    )
    if failed:
        raise SystemExit(EXIT_FAILED)


def _configuration(target: Target) -> Check:
    if target.settings is None:
        return Check(PASS, "configuration", "--url", f"one {target.jobs.dialect.value} database")
    settings = target.settings
    shape = f"{len(target.shards)} shard(s), namespace {settings.namespace}"
    if target.jobs_fallback:
        return Check(
            WARN,
            "configuration",
            target.source,
            f"{shape}; the default shard has no jobs-config, so jobs would poll on its primary-config "
            f"(and build_runtime refuses @distributed_job classes): add a small jobs-config",
        )
    return Check(PASS, "configuration", target.source, shape)


def _pool_checks(invocation: Invocation, target: Target, shard: Shard, pool: Pool) -> list[Check]:
    try:
        provider = invocation.open(pool)
        with pool.connect(provider) as connection:
            version = _server_version(connection)
    except CliError as error:
        return [Check(FAIL, "connection", pool.label, str(error))]
    checks = [Check(PASS, "connection", pool.label, f"{pool.dialect.value} {version} at {pool.url}")]
    with provider.connect() as connection:
        if pool is shard.primary:
            tables = eventlog_tables(pool.dialect, shard.eventlog_schema)
            for table in (tables.events, tables.event_notifications):
                checks.append(
                    _table_check(target, pool, connection, table.name, table.schema, table.c.keys())
                )
            checks.append(_clock_check(pool, connection))
        if pool is target.jobs:
            columns = [c.strip() for c in SCHEDULED_TASKS_COLUMNS.split(",")]
            checks.append(_table_check(target, pool, connection, DEFAULT_TABLE_NAME, None, columns))
    return checks


def _server_version(connection: sa.Connection) -> str:
    info = connection.dialect.server_version_info or ()
    return ".".join(str(part) for part in info[:3])


def _table_check(
    target: Target, pool: Pool, connection: sa.Connection, name: str, schema: str | None, expected: list[str]
) -> Check:
    qualified = f"{schema}.{name}" if schema else name
    inspector = sa.inspect(connection)
    if not inspector.has_table(name, schema=schema):
        return Check(FAIL, "table", pool.label, str(target.missing_table(qualified, pool)))
    present = {column["name"].lower() for column in inspector.get_columns(name, schema=schema)}
    missing = [column for column in expected if column.lower() not in present]
    if missing:
        return Check(
            FAIL,
            "table",
            pool.label,
            f"{qualified} lacks column(s) {', '.join(missing)}: it was not created by ekbatan migrate; "
            f"migrate a fresh database or add the columns as the framework's DDL has them",
        )
    return Check(PASS, "table", pool.label, f"{qualified}: {len(expected)} expected columns present")


def _clock_check(pool: Pool, connection: sa.Connection) -> Check:
    query = _SERVER_NOW.get(pool.dialect)
    if query is None:
        return Check(PASS, "clock", pool.label, "SQLite: the database uses this machine's clock")
    before = time.time()
    server = connection.exec_driver_sql(query).scalar_one()
    after = time.time()
    server_seconds = server.replace(tzinfo=UTC).timestamp()
    offset = server_seconds - (before + after) / 2
    uncertainty = (after - before) / 2
    detail = f"database clock {offset:+.3f} s from this machine's (±{uncertainty:.3f} s)"
    if abs(offset) - uncertainty > CLOCK_TOLERANCE_SECONDS:
        return Check(
            WARN,
            "clock",
            pool.label,
            f"{detail}: more than {CLOCK_TOLERANCE_SECONDS:g} s; dead executions are detected by comparing "
            f"heartbeats across machines, so synchronise the clocks (NTP)",
        )
    return Check(PASS, "clock", pool.label, detail)
