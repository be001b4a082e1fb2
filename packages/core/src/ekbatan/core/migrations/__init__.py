"""Framework tables per dialect and the migrator that applies them to every shard."""

from typing import TYPE_CHECKING

from ekbatan.core import _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.migrations._contributions import (
        ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,
        Migration as Migration,
        MigrationContributorError as MigrationContributorError,
        load_contributions as load_contributions,
    )
    from ekbatan.core.migrations._core_contributions import core_migrations as core_migrations
    from ekbatan.core.migrations._eventlog_ddl import (
        DEFAULT_EVENTLOG_SCHEMA as DEFAULT_EVENTLOG_SCHEMA,
        EventlogColumnTypes as EventlogColumnTypes,
        eventlog_column_types as eventlog_column_types,
        eventlog_index_name as eventlog_index_name,
        eventlog_schema_statements as eventlog_schema_statements,
        eventlog_statements as eventlog_statements,
        eventlog_table_name as eventlog_table_name,
    )
    from ekbatan.core.migrations._eventlog_metadata import (
        EventlogTables as EventlogTables,
        eventlog_tables as eventlog_tables,
    )
    from ekbatan.core.migrations._history import HISTORY_TABLE as HISTORY_TABLE
    from ekbatan.core.migrations._migrator import (
        MigrationError as MigrationError,
        MigrationTarget as MigrationTarget,
        TargetReport as TargetReport,
        framework_statements as framework_statements,
        migrate as migrate,
        migration_targets as migration_targets,
    )
    from ekbatan.core.migrations._table_presence import TablePresence as TablePresence


__getattr__, __dir__, __all__ = _lazy_exports.lazy_exports(
    __name__,
    {
        "ekbatan.core.migrations._contributions": (
            "ENTRY_POINT_GROUP",
            "Migration",
            "MigrationContributorError",
            "load_contributions",
        ),
        "ekbatan.core.migrations._core_contributions": ("core_migrations",),
        "ekbatan.core.migrations._eventlog_ddl": (
            "DEFAULT_EVENTLOG_SCHEMA",
            "EventlogColumnTypes",
            "eventlog_column_types",
            "eventlog_index_name",
            "eventlog_schema_statements",
            "eventlog_statements",
            "eventlog_table_name",
        ),
        "ekbatan.core.migrations._eventlog_metadata": ("EventlogTables", "eventlog_tables"),
        "ekbatan.core.migrations._history": ("HISTORY_TABLE",),
        "ekbatan.core.migrations._table_presence": ("TablePresence",),
        "ekbatan.core.migrations._migrator": (
            "MigrationError",
            "MigrationTarget",
            "TargetReport",
            "framework_statements",
            "migrate",
            "migration_targets",
        ),
    },
)
