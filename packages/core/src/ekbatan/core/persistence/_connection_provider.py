"""``ConnectionProvider``: one lazily connecting SQLAlchemy engine built from a ``DataSourceConfig``."""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa

from ekbatan.core.persistence._credentials import masked_url
from ekbatan.core.persistence._data_source import DEFAULT_CONNECTION_TIMEOUT_MS, DataSourceConfig
from ekbatan.core.persistence._dialect_names import DialectName
from ekbatan.core.persistence._liveness import install_idle_ping
from ekbatan.core.persistence._session_setup import install_session_setup

log = logging.getLogger("ekbatan.core.persistence.connection_provider")


def engine_options(config: DataSourceConfig) -> dict[str, Any]:
    """The ``create_engine`` keyword arguments that the pool settings translate to.

    ``maximum-pool-size`` → ``pool_size`` with ``max_overflow=0`` (a hard ceiling, as in
    HikariCP); ``connection-timeout`` → ``pool_timeout``; ``max-lifetime`` → ``pool_recycle``.
    ``minimum-idle``, ``idle-timeout`` and ``leak-detection-threshold`` have no SQLAlchemy
    counterpart (the pool opens connections on demand and keeps them until recycled) and are
    accepted only so that Java configs stay portable.

    No ``pool_pre_ping``: a ``ConnectionProvider`` checks a server connection only after it sat
    idle (``install_idle_ping``); an engine built from these options alone should call that too.
    """
    dialect = config.dialect
    url = config.sqlalchemy_url()
    if dialect is DialectName.SQLITE and url.database in (None, "", ":memory:"):
        return {}  # an in-memory database lives in one connection; pool sizing does not apply
    options: dict[str, Any] = {
        "pool_size": config.maximum_pool_size,
        "max_overflow": 0,
        "pool_timeout": (config.connection_timeout or DEFAULT_CONNECTION_TIMEOUT_MS) / 1000,
    }
    if config.max_lifetime:
        options["pool_recycle"] = config.max_lifetime / 1000
    return options


class ConnectionProvider:
    """A pool that connects on first use, so an application can start before its database is up.

    Exposes the engine, the dialect (from the URL, no I/O) and a password-masked URL.
    ``close()`` disposes the pool and may be called more than once. ``config_path`` (e.g.
    ``ekbatan.sharding.groups[0].members[0].configs.jobs-config``) is named, with ``name``, by
    an error connecting the pool, so that a wrong user or password points at the key to fix.
    """

    def __init__(
        self,
        config: DataSourceConfig,
        *,
        name: str | None = None,
        config_path: str | None = None,
        **extra_engine_options: Any,
    ) -> None:
        self._config = config
        self._name = name
        self._config_path = config_path
        self._dialect = config.dialect
        self._engine = sa.create_engine(
            config.sqlalchemy_url(), **{**engine_options(config), **extra_engine_options}
        )
        install_session_setup(self._engine, self._dialect)
        if self._dialect is not DialectName.SQLITE and "pool_pre_ping" not in extra_engine_options:
            install_idle_ping(self._engine)  # servers drop idle connections; a file does not
        sa.event.listen(self._engine, "handle_error", self._name_the_pool_on_connect_errors)
        self._closed = False

    def _name_the_pool_on_connect_errors(self, context: sa.engine.ExceptionContext) -> None:
        # The pool connects lazily, so a wrong password or role surfaces on first use, far from
        # the configuration; the driver's message names neither the pool nor the key.
        if context.connection is not None or context.is_pre_ping:
            return
        where = self._config_path or self._name or "the pool"
        if self._config_path and self._name:
            where = f"{self._config_path} ({self._name})"
        if isinstance(context.sqlalchemy_exception, sa.exc.StatementError):
            context.sqlalchemy_exception.add_detail(f"connecting {where} to {self.url} failed")

    @classmethod
    def from_url(
        cls, url: str | sa.URL, *, name: str | None = None, **pool_settings: Any
    ) -> ConnectionProvider:
        """Shortcut for ``ConnectionProvider(DataSourceConfig(url=..., **pool_settings))``."""
        text = url.render_as_string(hide_password=False) if isinstance(url, sa.URL) else url
        return cls(DataSourceConfig(url=text, **pool_settings), name=name)

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    @property
    def dialect(self) -> DialectName:
        return self._dialect

    @property
    def url(self) -> str:
        """The URL with the password masked."""
        return masked_url(self._engine.url)

    @property
    def config(self) -> DataSourceConfig:
        return self._config

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def config_path(self) -> str | None:
        """Where the pool's settings are in ``application.yml``, when it was built from them."""
        return self._config_path

    @property
    def closed(self) -> bool:
        return self._closed

    def connect(self) -> sa.Connection:
        """A pooled connection (SQLAlchemy ``Connection``); close it to give it back."""
        return self._engine.connect()

    def begin(self) -> Any:
        """``engine.begin()``: a connection in a transaction, committed when the block ends."""
        return self._engine.begin()

    def evict(self, connection: sa.Connection) -> None:
        """Drop a connection whose state is unknown instead of returning it to the pool."""
        connection.invalidate()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    def __repr__(self) -> str:
        label = f" {self._name!r}" if self._name else ""
        return f"<ConnectionProvider{label} {self._dialect.value} {self.url}>"

    __str__ = __repr__
