"""Connection pools and transactions: ``DataSourceConfig``, ``ConnectionProvider``, ``TransactionManager``."""

from typing import TYPE_CHECKING

from ekbatan.core import _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.persistence._column_types import UtcDateTime as UtcDateTime, UuidText as UuidText
    from ekbatan.core.persistence._connection_provider import (
        ConnectionProvider as ConnectionProvider,
        engine_options as engine_options,
    )
    from ekbatan.core.persistence._credentials import mask_url_password as mask_url_password
    from ekbatan.core.persistence._data_source import DataSourceConfig as DataSourceConfig
    from ekbatan.core.persistence._dialect_names import (
        DialectName as DialectName,
        dialect_name_from_url as dialect_name_from_url,
    )
    from ekbatan.core.persistence._jdbc_urls import (
        TranslatedJdbcUrl as TranslatedJdbcUrl,
        UnsupportedJdbcUrlError as UnsupportedJdbcUrlError,
        dialect_name_from_jdbc_url as dialect_name_from_jdbc_url,
        translate_jdbc_url as translate_jdbc_url,
    )
    from ekbatan.core.persistence._liveness import (
        DEFAULT_IDLE_PING_SECONDS as DEFAULT_IDLE_PING_SECONDS,
        install_idle_ping as install_idle_ping,
    )
    from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier as validate_sql_identifier
    from ekbatan.core.persistence._transaction_manager import TransactionManager as TransactionManager


__getattr__, __dir__, __all__ = _lazy_exports.lazy_exports(
    __name__,
    {
        "ekbatan.core.persistence._column_types": ("UtcDateTime", "UuidText"),
        "ekbatan.core.persistence._connection_provider": ("ConnectionProvider", "engine_options"),
        "ekbatan.core.persistence._credentials": ("mask_url_password",),
        "ekbatan.core.persistence._data_source": ("DataSourceConfig",),
        "ekbatan.core.persistence._dialect_names": ("DialectName", "dialect_name_from_url"),
        "ekbatan.core.persistence._jdbc_urls": (
            "TranslatedJdbcUrl",
            "UnsupportedJdbcUrlError",
            "dialect_name_from_jdbc_url",
            "translate_jdbc_url",
        ),
        "ekbatan.core.persistence._liveness": ("DEFAULT_IDLE_PING_SECONDS", "install_idle_ping"),
        "ekbatan.core.persistence._sql_identifiers": ("validate_sql_identifier",),
        "ekbatan.core.persistence._transaction_manager": ("TransactionManager",),
    },
)
