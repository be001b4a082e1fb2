"""Framework tables per dialect and the migrator that applies them to every shard."""

from typing import TYPE_CHECKING

from ekbatan.core.lazy_exports import lazy_exports as _lazy_exports

if TYPE_CHECKING:
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
    from ekbatan.core.migrations.eventlog_metadata import EventlogTables, eventlog_tables
    from ekbatan.core.migrations.history import HISTORY_TABLE
    from ekbatan.core.migrations.migrator import (
        MigrationError,
        MigrationTarget,
        TargetReport,
        framework_statements,
        migrate,
        migration_targets,
    )
    from ekbatan.core.migrations.table_presence import TablePresence

__all__ = [
    "DEFAULT_EVENTLOG_SCHEMA",
    "ENTRY_POINT_GROUP",
    "HISTORY_TABLE",
    "EventlogTables",
    "Migration",
    "MigrationContributorError",
    "MigrationError",
    "MigrationTarget",
    "TablePresence",
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

__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ekbatan.core.migrations.contributions": (
            "ENTRY_POINT_GROUP",
            "Migration",
            "MigrationContributorError",
            "load_contributions",
        ),
        "ekbatan.core.migrations.core_contributions": ("migrations as core_migrations",),
        "ekbatan.core.migrations.eventlog_ddl": (
            "DEFAULT_EVENTLOG_SCHEMA",
            "eventlog_statements",
            "eventlog_table_names",
        ),
        "ekbatan.core.migrations.eventlog_metadata": ("EventlogTables", "eventlog_tables"),
        "ekbatan.core.migrations.history": ("HISTORY_TABLE",),
        "ekbatan.core.migrations.table_presence": ("TablePresence",),
        "ekbatan.core.migrations.migrator": (
            "MigrationError",
            "MigrationTarget",
            "TargetReport",
            "framework_statements",
            "migrate",
            "migration_targets",
        ),
    },
)
