"""What core does differently on each database, behind one interface (:class:`DialectSupport`)."""

from __future__ import annotations

from ekbatan.core.persistence._dialect_names import DialectName as _DialectName
from ekbatan.core.persistence.dialects._base import DialectSupport
from ekbatan.core.persistence.dialects._mysql import MySqlFamilySupport
from ekbatan.core.persistence.dialects._postgresql import PostgreSqlSupport
from ekbatan.core.persistence.dialects._sqlite import SqliteSupport

_SUPPORT: dict[_DialectName, DialectSupport] = {
    _DialectName.POSTGRESQL: PostgreSqlSupport(),
    _DialectName.MARIADB: MySqlFamilySupport(),
    _DialectName.MYSQL: MySqlFamilySupport(),
    _DialectName.SQLITE: SqliteSupport(),
}
_GENERIC = DialectSupport()


def dialect_support(dialect: _DialectName | str) -> DialectSupport:
    """The behaviour for ``dialect``, which may also be any SQLAlchemy dialect's name
    (``engine.dialect.name``): one Ekbatan does not support gets standard SQL and no setup."""
    try:
        return _SUPPORT[_DialectName(dialect)]
    except ValueError:
        return _GENERIC


__all__ = ["DialectSupport", "MySqlFamilySupport", "PostgreSqlSupport", "SqliteSupport", "dialect_support"]
