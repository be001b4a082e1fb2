"""Connection pools and transactions: ``DataSourceConfig``, ``ConnectionProvider``, ``TransactionManager``."""

from typing import TYPE_CHECKING

from ekbatan.core.lazy_exports import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.persistence.column_types import UtcDateTime, UuidText
    from ekbatan.core.persistence.connection_provider import ConnectionProvider, engine_options
    from ekbatan.core.persistence.credentials import mask_url_password
    from ekbatan.core.persistence.data_source import DataSourceConfig
    from ekbatan.core.persistence.dialect_names import DialectName, dialect_name_from_url
    from ekbatan.core.persistence.jdbc_urls import (
        TranslatedJdbcUrl,
        UnsupportedJdbcUrlError,
        dialect_name_from_jdbc_url,
        translate_jdbc_url,
    )
    from ekbatan.core.persistence.liveness import DEFAULT_IDLE_PING_SECONDS, install_idle_ping
    from ekbatan.core.persistence.sql_identifiers import validate_sql_identifier
    from ekbatan.core.persistence.transaction_manager import TransactionManager

__all__ = [
    "DEFAULT_IDLE_PING_SECONDS",
    "ConnectionProvider",
    "DataSourceConfig",
    "DialectName",
    "TransactionManager",
    "TranslatedJdbcUrl",
    "UnsupportedJdbcUrlError",
    "UtcDateTime",
    "UuidText",
    "dialect_name_from_jdbc_url",
    "dialect_name_from_url",
    "engine_options",
    "install_idle_ping",
    "mask_url_password",
    "translate_jdbc_url",
    "validate_sql_identifier",
]

__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ekbatan.core.persistence.column_types": ("UtcDateTime", "UuidText"),
        "ekbatan.core.persistence.connection_provider": ("ConnectionProvider", "engine_options"),
        "ekbatan.core.persistence.credentials": ("mask_url_password",),
        "ekbatan.core.persistence.data_source": ("DataSourceConfig",),
        "ekbatan.core.persistence.dialect_names": ("DialectName", "dialect_name_from_url"),
        "ekbatan.core.persistence.jdbc_urls": (
            "TranslatedJdbcUrl",
            "UnsupportedJdbcUrlError",
            "dialect_name_from_jdbc_url",
            "translate_jdbc_url",
        ),
        "ekbatan.core.persistence.liveness": ("DEFAULT_IDLE_PING_SECONDS", "install_idle_ping"),
        "ekbatan.core.persistence.sql_identifiers": ("validate_sql_identifier",),
        "ekbatan.core.persistence.transaction_manager": ("TransactionManager",),
    },
)
