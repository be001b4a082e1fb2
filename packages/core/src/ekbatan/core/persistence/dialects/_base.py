"""The seam between core and one database: everything core says or does differently there.

A module that needs per-database SQL or setup asks :func:`~ekbatan.core.persistence.dialects.
dialect_support` for the object and calls it, so it reads as the protocol (take the migration
lock, create the history table, set up a new connection) and never branches on a dialect name.
This base class is what a database SQLAlchemy speaks but Ekbatan does not know gets: standard
SQL types and nothing to set up.
"""

from __future__ import annotations

from typing import Any, ClassVar

import sqlalchemy as sa


class DialectSupport:
    """Base behaviour; each supported database overrides what it does differently."""

    #: the DDL type of a timestamp stored as naive UTC (``ekbatan_schema_history.applied_at``)
    timestamp_ddl: ClassVar[str] = "TIMESTAMP"

    def timestamp_type(self) -> sa.types.TypeEngine[Any]:
        """The SQLAlchemy type that stores a naive UTC timestamp (behind ``UtcDateTime``)."""
        return sa.DateTime(timezone=False)

    def install_session_setup(self, engine: sa.Engine) -> None:
        """Register what every new connection of ``engine`` must be told before Ekbatan uses it."""

    def acquire_migration_lock(self, connection: sa.Connection, timeout_seconds: int) -> None:
        """Serialise migrators of one database (several replicas may start at once)."""

    def release_migration_lock(self, connection: sa.Connection) -> None:
        """Release what :meth:`acquire_migration_lock` took."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"
