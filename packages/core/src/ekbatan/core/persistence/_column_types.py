"""Column types whose Python values are the same on every dialect: aware UTC datetimes, UUIDs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SaDialect

from ekbatan.core.persistence.dialects import dialect_support


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A timestamp stored as naive UTC (``TIMESTAMP`` / ``DATETIME(6)``), read back as aware UTC.

    Binding a naive datetime is refused: silently assuming a zone is how hours go missing.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: SaDialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(dialect_support(dialect.name).timestamp_type())

    def process_bind_param(self, value: datetime | None, dialect: SaDialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(
                f"naive datetime {value.isoformat()} given; pass an aware one, e.g. with tzinfo=UTC"
            )
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: SaDialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)


class UuidText(sa.TypeDecorator[uuid.UUID]):
    """A UUID kept as canonical lower-case hyphenated text in ``CHAR(36)`` (MySQL, SQLite)."""

    impl = sa.CHAR(36)
    cache_ok = True

    def process_bind_param(self, value: uuid.UUID | str | None, dialect: SaDialect) -> str | None:
        if value is None:
            return None
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))

    def process_result_value(self, value: str | None, dialect: SaDialect) -> uuid.UUID | None:
        return None if value is None else uuid.UUID(value)
