"""``migrate``: apply every contributed migration to every shard's primary database.

Targets run one after another in configuration order (groups, then members) and the run stops
at the first failing target, whose name (``"<group>/<member>"``) the error carries. On each
target, versions already in ``ekbatan_schema_history`` are skipped; a pending version runs in
one transaction where the dialect has transactional DDL (PostgreSQL, SQLite) and is recorded
in the same transaction. MySQL and MariaDB commit DDL as it runs, so there a version is
recorded only after all its statements succeeded, and re-running completes a partial one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ekbatan.core.migrations._contributions import Migration, MigrationTuple, load_contributions, plan
from ekbatan.core.migrations._eventlog_ddl import DEFAULT_EVENTLOG_SCHEMA
from ekbatan.core.migrations._history import (
    acquire_migration_lock,
    applied_versions,
    history_table_statement,
    record_version,
    release_migration_lock,
    rerecord_version,
)
from ekbatan.core.persistence._connection_provider import ConnectionProvider
from ekbatan.core.persistence._credentials import mask_url_password
from ekbatan.core.persistence._data_source import DataSourceConfig
from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier
from ekbatan.core.sharding._config import PRIMARY_CONFIG, ShardingConfig, pool_config_key, target_name
from ekbatan.core.sharding._registry import DatabaseRegistry
from ekbatan.core.sharding._shard_identifier import ShardIdentifier

log = logging.getLogger("ekbatan.core.migrations.migrator")


@dataclass(frozen=True)
class MigrationTarget:
    """One database to migrate: a name for messages, where to connect, its eventlog name."""

    name: str
    data_source: DataSourceConfig | ConnectionProvider | str
    eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA
    config_path: str | None = None  # named by a connection error, e.g. "…members[0].configs.primary-config"

    def __post_init__(self) -> None:
        validate_sql_identifier(self.eventlog_schema, "eventlog schema")


@dataclass
class TargetReport:
    name: str
    dialect: DialectName
    applied: list[tuple[str, str]] = field(default_factory=list)
    already_applied: list[tuple[str, str]] = field(default_factory=list)
    #: recorded as applied, but a table they create was missing: applied again
    reapplied: list[tuple[str, str]] = field(default_factory=list)


class MigrationError(RuntimeError):
    """A target failed; ``target`` names it and ``completed`` reports the targets done before it."""

    def __init__(self, target: str, message: str, completed: list[TargetReport]) -> None:
        self.target = target
        self.completed = completed
        super().__init__(message)


def migration_targets(source: Any) -> list[MigrationTarget]:
    """Targets for the ekbatan settings, a ``ShardingConfig`` or a ``DatabaseRegistry``."""
    if isinstance(source, DatabaseRegistry):
        managers = ((shard, source.transaction_manager(shard)) for shard in source.shards)
        return [
            MigrationTarget(source.shard_name(shard), m.primary, m.eventlog_schema) for shard, m in managers
        ]
    sharding = source if isinstance(source, ShardingConfig) else getattr(source, "sharding", None)
    if isinstance(sharding, ShardingConfig):
        return [
            MigrationTarget(
                target_name(g, m),
                m.primary_config,
                m.eventlog_schema,
                pool_config_key(sharding, ShardIdentifier(g.group, m.member), PRIMARY_CONFIG),
            )
            for g, m in sharding.members()
        ]
    targets = list(source)
    if not all(isinstance(t, MigrationTarget) for t in targets):
        raise TypeError(
            "migrate() takes the ekbatan settings, a ShardingConfig, a DatabaseRegistry or MigrationTargets"
        )
    return targets


def migrate(
    source: Any, *, contributions: Iterable[Migration | MigrationTuple] | None = None
) -> list[TargetReport]:
    """Bring every target up to date; return one report per target.

    ``contributions`` defaults to everything registered under the ``ekbatan.migrations`` entry
    points (core's eventlog tables, the scheduler's ``scheduled_tasks``, ...).
    """
    migrations = load_contributions() if contributions is None else plan(contributions)
    reports: list[TargetReport] = []
    for target in migration_targets(source):
        try:
            reports.append(_migrate_target(target, migrations))
        except Exception as error:
            detail = mask_url_password(f"{type(error).__name__}: {error}")
            raise MigrationError(
                target.name,
                f"migrating shard {target.name} failed{_at(error)}: {detail}. "
                f"Targets before it are migrated; fix the cause and run migrate again",
                reports,
            ) from error
    return reports


def framework_statements(
    dialect: DialectName | str,
    *,
    eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA,
    contributions: Iterable[Migration | MigrationTuple] | None = None,
) -> list[str]:
    """Every contributed statement for ``dialect`` in apply order (e.g. for an Alembic ``op.execute``)."""
    migrations = load_contributions() if contributions is None else plan(contributions)
    return [s for m in migrations for s in m.statements_for(dialect, eventlog_schema=eventlog_schema)]


class _VersionFailed(Exception):
    def __init__(self, migration: Migration, cause: BaseException) -> None:
        self.migration = migration
        super().__init__(f"{type(cause).__name__}: {cause}")


def _at(error: BaseException) -> str:
    if isinstance(error, _VersionFailed):
        return f" at {error.migration.component} {error.migration.version}"
    return ""


def _migrate_target(target: MigrationTarget, migrations: Sequence[Migration]) -> TargetReport:
    owned = not isinstance(target.data_source, ConnectionProvider)
    if isinstance(target.data_source, ConnectionProvider):
        provider = target.data_source
    elif isinstance(target.data_source, DataSourceConfig):
        provider = ConnectionProvider(
            target.data_source, name=f"{target.name} migrations", config_path=target.config_path, pool_size=1
        )
    else:
        provider = ConnectionProvider.from_url(target.data_source, name=f"{target.name} migrations")
    try:
        return _apply(target, provider, migrations)
    finally:
        if owned:
            provider.close()


def _apply(
    target: MigrationTarget, provider: ConnectionProvider, migrations: Sequence[Migration]
) -> TargetReport:
    dialect = provider.dialect
    report = TargetReport(target.name, dialect)
    with provider.connect() as connection:
        acquire_migration_lock(connection, dialect)
        connection.commit()
        try:
            connection.exec_driver_sql(history_table_statement(dialect))
            connection.commit()
            applied = applied_versions(connection)
            connection.commit()
            for migration in migrations:
                key = (migration.component, migration.version)
                statements = migration.statements_for(dialect, eventlog_schema=target.eventlog_schema)
                checksum = migration.checksum(statements)
                if key in applied:
                    missing = missing_tables(connection, statements)
                    connection.commit()
                    reason = f"table(s) {', '.join(missing)} do not exist"
                    # a later version may add to a table an earlier one just recreated (an index)
                    if not missing and key[0] in {c for c, _ in report.reapplied}:
                        reason = f"an earlier {key[0]} version was just applied again"
                    elif not missing:
                        report.already_applied.append(key)
                        if applied[key] != checksum:
                            log.warning(
                                "%s: %s %s was applied with different statements than it has now; "
                                "it is not re-run (write a new version to change a schema)",
                                target.name,
                                *key,
                            )
                        continue
                    log.warning(
                        "%s: %s %s is recorded as applied but %s; applying it again",
                        target.name,
                        *key,
                        reason,
                    )
                try:
                    for statement in statements:
                        connection.exec_driver_sql(statement)
                    if key in applied:
                        rerecord_version(connection, *key, migration.description, checksum)
                    else:
                        record_version(connection, *key, migration.description, checksum)
                    connection.commit()
                except Exception as error:
                    connection.rollback()
                    raise _VersionFailed(migration, error) from error
                if key in applied:
                    report.reapplied.append(key)
                    continue
                log.info("%s: applied %s %s (%s)", target.name, *key, migration.description)
                report.applied.append(key)
        finally:
            try:
                release_migration_lock(connection, dialect)
                connection.commit()
            except Exception:
                # Closing the session releases the lock anyway; keep the original error.
                log.debug("could not release the migration lock on %s", target.name, exc_info=True)
    return report


_CREATE_TABLE = re.compile(r"create\s+table\s+if\s+not\s+exists\s+([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)", re.I)


def missing_tables(connection: sa.Connection, statements: Sequence[str]) -> list[str]:
    """The tables that ``statements`` create (``CREATE TABLE IF NOT EXISTS``) and that do not exist."""
    inspector = sa.inspect(connection)
    missing = []
    for statement in statements:
        for qualified in _CREATE_TABLE.findall(statement):
            schema, _, name = qualified.rpartition(".")
            if not inspector.has_table(name, schema=schema or None):
                missing.append(qualified)
    return missing
