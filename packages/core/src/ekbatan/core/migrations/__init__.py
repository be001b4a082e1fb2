"""Framework tables per dialect and the migrator that applies them to every shard."""

from ekbatan.core.migrations.contributions import (
    ENTRY_POINT_GROUP,
    Migration,
    MigrationContributorError,
    load_contributions,
)
from ekbatan.core.migrations.core_contributions import migrations as core_migrations
from ekbatan.core.migrations.eventlog_ddl import (
    DEFAULT_EVENTLOG_SCHEMA,
    eventlog_statements,
    eventlog_table_names,
)
from ekbatan.core.migrations.eventlog_tables import EventlogTables, eventlog_tables
from ekbatan.core.migrations.history import HISTORY_TABLE
from ekbatan.core.migrations.migrator import (
    MigrationError,
    MigrationTarget,
    TargetReport,
    framework_statements,
    migrate,
    migration_targets,
)

__all__ = [
    "DEFAULT_EVENTLOG_SCHEMA",
    "ENTRY_POINT_GROUP",
    "HISTORY_TABLE",
    "EventlogTables",
    "Migration",
    "MigrationContributorError",
    "MigrationError",
    "MigrationTarget",
    "TargetReport",
    "core_migrations",
    "eventlog_statements",
    "eventlog_table_names",
    "eventlog_tables",
    "framework_statements",
    "load_contributions",
    "migrate",
    "migration_targets",
]
