"""Per-dialect SQL backends behind one interface."""

from ekbatan.distributed_jobs.scheduler.dialects.base import Dialect, SqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.detection import (
    backend_for,
    dialect_from_url,
    resolve_dialect,
)
from ekbatan.distributed_jobs.scheduler.dialects.mysql import MariaDbDialect, MySqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.postgresql import PostgreSqlDialect
from ekbatan.distributed_jobs.scheduler.dialects.sqlite import SqliteDialect

__all__ = [
    "Dialect",
    "MariaDbDialect",
    "MySqlDialect",
    "PostgreSqlDialect",
    "SqlDialect",
    "SqliteDialect",
    "backend_for",
    "dialect_from_url",
    "resolve_dialect",
]
