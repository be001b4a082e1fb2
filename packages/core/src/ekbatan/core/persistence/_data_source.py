"""``DataSourceConfig``: the settings of one connection pool, as written under ``configs:``."""

from __future__ import annotations

import re
from typing import Any, Self

import sqlalchemy as sa
from pydantic import ConfigDict, Field, SecretStr, model_validator

from ekbatan.core.config._key_folding import KeyFoldingModel
from ekbatan.core.persistence._credentials import masked_url
from ekbatan.core.persistence._dialect_names import DialectName, dialect_name_from_url, parse_sqlalchemy_url
from ekbatan.core.persistence._jdbc_urls import translate_jdbc_url

DEFAULT_MAXIMUM_POOL_SIZE = 10
DEFAULT_CONNECTION_TIMEOUT_MS = 30_000


class DataSourceConfig(KeyFoldingModel):
    """One pool. Give either ``url`` (SQLAlchemy) or ``jdbc_url`` (translated); never both.

    A password may come inside the URL or as ``password``; either way it is moved into a
    :class:`~pydantic.SecretStr` and the stored URL no longer carries it, so neither ``repr``
    nor ``str`` nor a validation error can show it. Times are milliseconds, as in HikariCP.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    url: str | None = None
    jdbc_url: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    driver_class_name: str | None = Field(
        default=None, description="Accepted for portability of Java configs; the URL decides the driver."
    )
    maximum_pool_size: int = Field(default=DEFAULT_MAXIMUM_POOL_SIZE, ge=1)
    minimum_idle: int | None = Field(default=None, ge=0)
    connection_timeout: int | None = Field(default=None, gt=0, description="ms to wait for a free connection")
    idle_timeout: int | None = Field(default=None, ge=0, description="ms; no SQLAlchemy equivalent")
    max_lifetime: int | None = Field(default=None, ge=0, description="ms; becomes pool_recycle, 0 = never")
    leak_detection_threshold: int | None = Field(
        default=None, ge=0, description="ms; no SQLAlchemy equivalent"
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.url is None and self.jdbc_url is None:
            raise ValueError(
                "give url (a SQLAlchemy URL such as 'postgresql+psycopg://app@db:5432/app') or jdbc-url"
            )
        if self.url is not None and self.jdbc_url is not None:
            raise ValueError("give either url or jdbc-url, not both")
        if self.url is not None and not self.url.strip():
            raise ValueError(
                "url is blank; write a SQLAlchemy URL such as 'postgresql+psycopg://app@db:5432/app'"
            )
        if self.jdbc_url is not None and not self.jdbc_url.strip():
            raise ValueError("jdbc-url is blank; write a JDBC URL such as 'jdbc:postgresql://db:5432/app'")
        if self.username is not None and not self.username.strip():
            raise ValueError("username is blank; remove the key or give the user name")
        if self.minimum_idle is not None and self.minimum_idle > self.maximum_pool_size:
            raise ValueError(
                f"minimum-idle ({self.minimum_idle}) must not exceed maximum-pool-size ({self.maximum_pool_size})"
            )
        if self.leak_detection_threshold not in (None, 0) and self.leak_detection_threshold < 2000:
            raise ValueError(
                f"leak-detection-threshold is {self.leak_detection_threshold} ms; write 0 (off) or at least 2000"
            )
        self._move_password_out_of_url()
        return self

    def _move_password_out_of_url(self) -> None:
        # Frozen model: the normalised forms are written once, here, during validation.
        if self.url is not None:
            parsed = parse_sqlalchemy_url(self.url.strip())
            dialect_name_from_url(parsed)
            embedded = parsed.password
            if embedded is not None:
                if self.password is not None:
                    raise ValueError("a password is given both inside url and as password; keep one")
                object.__setattr__(self, "password", SecretStr(str(embedded)))
                object.__setattr__(
                    self, "url", parsed._replace(password=None).render_as_string(hide_password=False)
                )
        else:
            assert self.jdbc_url is not None
            translated = translate_jdbc_url(self.jdbc_url)
            embedded = translated.url.password
            if embedded is not None:
                if self.password is not None:
                    raise ValueError("a password is given both inside jdbc-url and as password; keep one")
                object.__setattr__(self, "password", SecretStr(str(embedded)))
                object.__setattr__(self, "jdbc_url", _without_jdbc_password(self.jdbc_url))

    @property
    def dialect(self) -> DialectName:
        """Known from the URL alone; no connection is opened."""
        return dialect_name_from_url(self._url_without_override())

    def _url_without_override(self) -> sa.URL:
        if self.url is not None:
            return parse_sqlalchemy_url(self.url.strip())
        assert self.jdbc_url is not None
        return translate_jdbc_url(self.jdbc_url).url

    def sqlalchemy_url(self) -> sa.URL:
        """The URL to connect with, credentials included (keep it out of logs: ``str()`` masks it)."""
        url = self._url_without_override()
        if self.username is not None:
            url = url.set(username=self.username)
        if self.password is not None:
            url = url.set(password=self.password.get_secret_value())
        return url

    def safe_url(self) -> str:
        """The URL with its password replaced by ``***`` (left out when empty): fit for logs and messages."""
        return masked_url(self.sqlalchemy_url())

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if value is not None:
                yield name, value


def _without_jdbc_password(jdbc_url: str) -> str:
    no_query_password = re.sub(r"([?&;])password=[^&;]*&?", r"\1", jdbc_url, flags=re.IGNORECASE)
    no_query_password = no_query_password.rstrip("?&;")
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1@", no_query_password)
