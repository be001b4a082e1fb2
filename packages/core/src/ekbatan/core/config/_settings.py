"""``EkbatanSettings`` (everything under ``ekbatan:``) and ``load_settings(path)``.

Loading runs in this order: read YAML → expand ``${VAR}`` placeholders → fold keys to
snake_case → apply ``EKBATAN_…`` environment overrides → validate. Every failure becomes one
:class:`SettingsError` listing each bad key by its path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ekbatan.core.config._environment import EkbatanEnvironmentSource, EnvironmentOverrideError
from ekbatan.core.config._errors import SettingsError, problems_from_validation_error, render_path
from ekbatan.core.config._jobs import JobsConfig
from ekbatan.core.config._key_folding import DuplicateSpellingError, fold_mapping_keys, fold_tree
from ekbatan.core.config._local_event_handler import LocalEventHandlerConfig
from ekbatan.core.config._observability import ObservabilityConfig
from ekbatan.core.config._placeholders import PlaceholderError, expand_placeholders
from ekbatan.core.config._yaml_loading import read_yaml_document
from ekbatan.core.sharding._config import ShardingConfig

ROOT_KEY = "ekbatan"
_NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class EkbatanSettings(BaseSettings):
    """The ``ekbatan:`` tree of ``application.yml``; attribute names are the snake_case keys.

    Constructing it in code reads nothing from the environment; :func:`load_settings` is the
    entry point that combines the file, placeholders and environment overrides.
    """

    model_config = SettingsConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    namespace: str = "default"
    sharding: ShardingConfig
    jobs: JobsConfig = Field(default_factory=JobsConfig)
    local_event_handler: LocalEventHandlerConfig = Field(default_factory=LocalEventHandlerConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Values come only from what load_settings assembled (or the caller passed); the
        # environment is applied there, by EkbatanEnvironmentSource, list indices included.
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _fold_keys(cls, value: Any) -> Any:
        return fold_mapping_keys(value)

    @field_validator("jobs", "local_event_handler", "observability", mode="before")
    @classmethod
    def _null_means_defaults(cls, value: Any, info: Any) -> Any:
        if value is None:
            return _SECTIONS[info.field_name]()
        return value

    @field_validator("namespace")
    @classmethod
    def _dotted_identifier(cls, value: str) -> str:
        if not _NAMESPACE.match(value):
            hint = f" (hyphens are not allowed: write {value.replace('-', '_')!r})" if "-" in value else ""
            raise ValueError(
                f"{value!r} is not a dotted identifier such as 'wallet' or 'my_service.orders'{hint}"
            )
        return value


#: the optional sections, each empty (``observability:`` alone) meaning its defaults
_SECTIONS: dict[str, type[Any]] = {
    "jobs": JobsConfig,
    "local_event_handler": LocalEventHandlerConfig,
    "observability": ObservabilityConfig,
}


def load_settings(path: str | FilePath, *, environ: Mapping[str, str] | None = None) -> EkbatanSettings:
    """Read ``path`` (an ``application.yml``) and return its validated ``ekbatan:`` settings.

    ``environ`` defaults to ``os.environ``; it feeds both ``${VAR}`` placeholders and the
    ``EKBATAN_…`` overrides.
    """
    source = str(path)
    try:
        document = read_yaml_document(path)
    except OSError as error:
        raise SettingsError(source, [("(file)", f"cannot read it: {error.strerror or error}")]) from None
    except Exception as error:  # a YAML syntax error: its position is the useful part
        raise SettingsError(source, [("(file)", f"is not valid YAML: {error}")]) from None
    return settings_from_document(document, environ=environ, source=source)


def settings_from_document(
    document: Any, *, environ: Mapping[str, str] | None = None, source: str = "<document>"
) -> EkbatanSettings:
    """Like :func:`load_settings` for an already parsed document (a mapping with an ``ekbatan`` key)."""
    environ = os.environ if environ is None else environ
    if not isinstance(document, Mapping) or ROOT_KEY not in document:
        raise SettingsError(
            source, [(ROOT_KEY, "is required: put every Ekbatan setting under a top-level 'ekbatan:' key")]
        )
    subtree = document[ROOT_KEY]
    if subtree is None:
        subtree = {}
    if not isinstance(subtree, Mapping):
        raise SettingsError(source, [(ROOT_KEY, "must be a mapping of settings")])
    try:
        expanded = expand_placeholders(subtree, environ)
    except PlaceholderError as error:
        raise SettingsError(source, [(render_path(error.path, None), str(error))]) from None
    try:
        folded, spellings = fold_tree(expanded)
    except DuplicateSpellingError as error:
        raise SettingsError(source, [(render_path(error.path, None), str(error))]) from None
    env_source = EkbatanEnvironmentSource(EkbatanSettings, folded, environ)
    try:
        tree = env_source()
    except EnvironmentOverrideError as error:
        raise SettingsError(source, [(error.variable, str(error))]) from None
    try:
        return EkbatanSettings(**tree)
    except ValidationError as error:
        problems = problems_from_validation_error(error, EkbatanSettings, spellings)
        overridden = {render_path(p, spellings): v for v, p in env_source.applied.items()}
        problems = [(path, _with_origin(message, overridden.get(path))) for path, message in problems]
        raise SettingsError(source, problems) from None


def _with_origin(message: str, variable: str | None) -> str:
    return f"{message} (value from environment variable {variable})" if variable else message
