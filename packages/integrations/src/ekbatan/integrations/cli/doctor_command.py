"""``ekbatan doctor``: what is wrong with a deployment, one pass/warn/fail line per finding.

Checks the configuration, every configured pool of every member (it connects and logs in), the
framework tables and their columns on every shard (``events`` and ``event_notifications`` under
the member's eventlog name on its primary; ``scheduled_tasks`` on the jobs pool's database), and
the clock offset between this machine and each database: the dead-execution window (heartbeat
interval × missed heartbeats) compares a row's ``last_heartbeat``, written with one instance's
clock, against another instance's clock, so clocks apart by more than a second are a warning.

With ``--packages`` (and ``--config``) it also compares what the application defines with what
the databases hold, and warns about: due rows of ``scheduled_tasks`` whose task name no job or
task of the packages has (they would wait forever); handlers subscribed to an event type of
which the eventlog holds no event while it holds others (never called); and events recorded by
actions the packages do not define (on MariaDB/MySQL, most often another application sharing
the server-wide ``eventlog`` database). Without ``--packages`` these are not checked, and the
report says so.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from ekbatan.core import DialectName, JobsPoolNotConfiguredError, SettingsError
from ekbatan.core.migrations import eventlog_tables
from ekbatan.distributed_jobs.scheduler import (
    TABLE_COLUMNS as SCHEDULED_TASKS_COLUMNS,
    SchedulerClient,
    held_table_name,
    history_table_name,
    pauses_table_name,
    traces_table_name,
)
from ekbatan.distributed_jobs.scheduler.schema import DEFAULT_TABLE_NAME
from ekbatan.integrations.cli.app import EXIT_FAILED, Invocation, describe, ekbatan_command
from ekbatan.integrations.cli.application import Application, application_options, load_application
from ekbatan.integrations.cli.tables import render_table
from ekbatan.integrations.cli.targets import CliError, Pool, Shard, Target
from ekbatan.integrations.construction import ConstructionError
from ekbatan.integrations.discovery import DiscoveryError
from ekbatan.local_event_handler import notifications_table, unrecorded_subscriptions

__all__ = ["Check", "doctor_command"]

PASS, WARN, FAIL = "pass", "warn", "fail"
#: clocks further apart than this (beyond the measurement's own uncertainty) are a warning
CLOCK_TOLERANCE_SECONDS = 1.0
#: how many names a warning lists before it says how many more there are
NAMES_LISTED = 5
UNKNOWN_APPLICATION = (
    "the application's task names, handlers and actions were not checked: doctor knows them only "
    "from --packages (with --config), as given to ekbatan worker"
)

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
@application_options
def doctor_command(invocation: Invocation, packages: str | None, container: str | None) -> None:
    """Check the configuration, every pool, the framework tables and the clocks; with --packages,
    also the scheduled task names, the handlers' event types and the eventlog's action names."""
    checks: list[Check] = []
    notes: list[str] = []
    try:
        target = invocation.target()
    except (SettingsError, CliError) as error:
        checks.append(Check(FAIL, "configuration", invocation.config or "application.yml", describe(error)))
        _report(invocation, checks, notes)
        return
    checks.append(_configuration(target))
    application: Application | None = None
    try:
        application = load_application(invocation, packages, container)
    except (DiscoveryError, ConstructionError, JobsPoolNotConfiguredError, ValueError, TypeError) as error:
        checks.append(Check(FAIL, "application", packages or "", describe(error)))
    else:
        if application is None:
            notes.append(UNKNOWN_APPLICATION)
    for shard in target.shards:
        for pool in shard.pools:
            checks += _pool_checks(invocation, target, shard, pool, application)
    _report(invocation, checks, notes)


def _report(invocation: Invocation, checks: list[Check], notes: list[str]) -> None:
    failed = any(c.status == FAIL for c in checks)
    data = {"ok": not failed, "checks": [asdict(c) for c in checks], "notes": notes}
    counts = {s: sum(1 for c in checks if c.status == s) for s in (PASS, WARN, FAIL)}
    summary = f"{counts[PASS]} passed, {counts[WARN]} warning(s), {counts[FAIL]} failed"
    invocation.emit(
        data,
        lambda: (
            render_table(("STATUS", "CHECK", "TARGET", "DETAIL"), [tuple(asdict(c).values()) for c in checks])
            + "".join(f"\nnote: {note}" for note in notes)
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
            f"{shape}; the default shard has no jobs-config: ekbatan worker (and build_runtime) will refuse "
            f"to start when the application has jobs, tasks or handlers (doctor knows them only from "
            f"--packages); add a small jobs-config",
        )
    return Check(PASS, "configuration", target.source, shape)


def _pool_checks(
    invocation: Invocation, target: Target, shard: Shard, pool: Pool, application: Application | None
) -> list[Check]:
    try:
        provider = invocation.open(pool)
        with pool.connect(provider) as connection:
            version = _server_version(connection)
    except CliError as error:
        return [Check(FAIL, "connection", pool.label, str(error))]
    checks = [Check(PASS, "connection", pool.label, f"{pool.dialect.value} {version} at {pool.url}")]
    with provider.connect() as connection:
        if pool is shard.primary:
            tables = (
                eventlog_tables(pool.dialect, shard.eventlog_schema).events,
                notifications_table(pool.dialect, shard.eventlog_schema),
            )
            table_checks = [
                _table_check(target, pool, connection, table.name, table.schema, table.c.keys())
                for table in tables
            ]
            checks += table_checks
            checks.append(_clock_check(pool, connection))
            if application is not None and all(c.status == PASS for c in table_checks):
                checks.append(_handlers_check(pool, shard, connection, application))
                checks.append(_actions_check(pool, shard, connection, application))
        if pool is target.jobs:
            columns = [c.strip() for c in SCHEDULED_TASKS_COLUMNS.split(",")]
            table_check = _table_check(target, pool, connection, DEFAULT_TABLE_NAME, None, columns)
            checks.append(table_check)
            if table_check.status == PASS:
                checks.append(_companions_check(pool, connection))
            if application is not None and table_check.status == PASS:
                checks.append(_task_names_check(pool, provider.engine, connection, application))
    return checks


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_LISTED])
    return shown if len(names) <= NAMES_LISTED else f"{shown} and {len(names) - NAMES_LISTED} more"


def _task_names_check(
    pool: Pool, engine: sa.Engine, connection: sa.Connection, application: Application
) -> Check:
    """Due, unpicked rows whose task name no job or task of the packages has: no worker of this
    application runs them, so they wait until one that knows the name does (or are deleted
    after the engine's ``delete_unresolved_after``, 14 days)."""
    d = SchedulerClient(engine, dialect=pool.dialect.value).repository.dialect
    due = connection.execute(
        sa.text(
            f"SELECT task_name, COUNT(*) FROM {DEFAULT_TABLE_NAME} WHERE picked = :false AND "
            f"execution_time <= :now GROUP BY task_name ORDER BY task_name"
        ),
        {"false": d.encode_bool(False), "now": d.encode_time(datetime.now(UTC))},
    ).all()
    unknown = [(name, int(count)) for name, count in due if name not in application.task_names]
    if not unknown:
        return Check(
            PASS,
            "task names",
            pool.label,
            f"every due row's task is one of the {len(application.task_names)} task(s) of {application.packages}",
        )
    described = []
    for name, count in unknown:
        closest = difflib.get_close_matches(name, sorted(application.task_names), n=1, cutoff=0.6)
        hint = f", did you mean {closest[0]!r}?" if closest else ""
        described.append(f"{name!r} ({count} row(s){hint})")
    return Check(
        WARN,
        "task names",
        pool.label,
        f"due rows of task names no job or task of {application.packages} has: {_listed(described)}; no "
        f"worker of this application runs them: fix the name where it is scheduled, or cancel them "
        f"(ekbatan tasks cancel)",
    )


def _handlers_check(pool: Pool, shard: Shard, connection: sa.Connection, application: Application) -> Check:
    if not application.handlers:
        return Check(PASS, "handlers", pool.label, f"{application.packages} has no event handler")
    missing = unrecorded_subscriptions(connection, pool.dialect, shard.eventlog_schema, application.handlers)
    if missing is None:
        return Check(
            PASS, "handlers", pool.label, "no event recorded yet: the handlers' event types cannot be checked"
        )
    if not missing:
        return Check(
            PASS, "handlers", pool.label, f"every handler's event type has events in {shard.eventlog_schema}"
        )
    described = [f"{m.handler!r} (event type {m.event_type!r})" for m in missing]
    return Check(
        WARN,
        "handlers",
        pool.label,
        f"handler(s) of an event type of which {shard.eventlog_schema} holds no event, so never called: "
        f"{_listed(described)}; check that each handler's event_type() is the class an action records",
    )


def _actions_check(pool: Pool, shard: Shard, connection: sa.Connection, application: Application) -> Check:
    """Events recorded by actions the packages do not define. On MariaDB/MySQL the default
    eventlog is one database for the whole server, so another application on the same server
    writes its events there too, and this application's fan-out sees them."""
    if not application.action_names:
        return Check(
            PASS, "eventlog actions", pool.label, f"{application.packages} has no @action: not checked"
        )
    events = eventlog_tables(pool.dialect, shard.eventlog_schema).events
    counts = connection.execute(
        sa.select(events.c.action_name, sa.func.count())
        .group_by(events.c.action_name)
        .order_by(sa.func.count().desc(), events.c.action_name)
    ).all()
    if not counts:
        return Check(
            PASS, "eventlog actions", pool.label, f"no events recorded yet in {shard.eventlog_schema}"
        )
    foreign = [(name, int(count)) for name, count in counts if name not in application.action_names]
    if not foreign:
        return Check(
            PASS,
            "eventlog actions",
            pool.label,
            f"every event in {shard.eventlog_schema} was recorded by an @action of {application.packages}",
        )
    total = sum(count for _, count in foreign)
    shared = (
        f"on {pool.dialect.value} {shard.eventlog_schema} is a database shared by every application on the "
        f"server: give each application its own eventlog-schema"
        if pool.dialect in (DialectName.MARIADB, DialectName.MYSQL)
        else "another application may share this eventlog: give each application its own eventlog-schema"
    )
    return Check(
        WARN,
        "eventlog actions",
        pool.label,
        f"{total} event(s) in {shard.eventlog_schema} were recorded by action(s) {application.packages} does "
        f"not define: {_listed([f'{name} ({count})' for name, count in foreign])}; {shared}",
    )


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


def _companions_check(pool: Pool, connection: sa.Connection) -> Check:
    """The tables beside ``scheduled_tasks`` (migrations ``scheduled_tasks`` 0002 to 0004): a
    deployment migrated before them runs, but keeps no dead letters, pauses, history or trace
    links."""
    inspector = sa.inspect(connection)
    tables = [
        f(DEFAULT_TABLE_NAME)
        for f in (held_table_name, pauses_table_name, history_table_name, traces_table_name)
    ]
    missing = [table for table in tables if not inspector.has_table(table)]
    if missing:
        return Check(
            WARN,
            "table",
            pool.label,
            f"{', '.join(missing)} missing: dead letters, pauses, execution history and trace links "
            "need them; run "
            "ekbatan migrate",
        )
    return Check(PASS, "table", pool.label, f"{', '.join(tables)} present")


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
