"""Settings: ``application.yml`` under ``ekbatan:``, placeholders, env overrides, ISO-8601 durations."""

from typing import TYPE_CHECKING

from ekbatan.core.lazy_exports import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.config.durations import (
        DurationFormatError,
        IsoDuration,
        format_iso_duration,
        parse_iso_duration,
    )
    from ekbatan.core.config.environment import EkbatanEnvironmentSource, EnvironmentOverrideError
    from ekbatan.core.config.errors import SettingsError
    from ekbatan.core.config.jobs import (
        JobsConfig,
        JobsHistoryConfig,
    )
    from ekbatan.core.config.key_folding import (
        fold_key,
        kebab_spelling,
    )
    from ekbatan.core.config.local_event_handler import HandlingConfig, LocalEventHandlerConfig
    from ekbatan.core.config.observability import ObservabilityConfig
    from ekbatan.core.config.placeholders import expand_placeholders
    from ekbatan.core.config.settings import EkbatanSettings, load_settings, settings_from_document

__all__ = [
    "DurationFormatError",
    "EkbatanEnvironmentSource",
    "EkbatanSettings",
    "EnvironmentOverrideError",
    "HandlingConfig",
    "IsoDuration",
    "JobsConfig",
    "JobsHistoryConfig",
    "LocalEventHandlerConfig",
    "ObservabilityConfig",
    "SettingsError",
    "expand_placeholders",
    "fold_key",
    "format_iso_duration",
    "kebab_spelling",
    "load_settings",
    "parse_iso_duration",
    "settings_from_document",
]

__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ekbatan.core.config.durations": (
            "DurationFormatError",
            "IsoDuration",
            "format_iso_duration",
            "parse_iso_duration",
        ),
        "ekbatan.core.config.environment": ("EkbatanEnvironmentSource", "EnvironmentOverrideError"),
        "ekbatan.core.config.errors": ("SettingsError",),
        "ekbatan.core.config.jobs": ("JobsConfig", "JobsHistoryConfig"),
        "ekbatan.core.config.key_folding": ("fold_key", "kebab_spelling"),
        "ekbatan.core.config.local_event_handler": ("HandlingConfig", "LocalEventHandlerConfig"),
        "ekbatan.core.config.observability": ("ObservabilityConfig",),
        "ekbatan.core.config.placeholders": ("expand_placeholders",),
        "ekbatan.core.config.settings": ("EkbatanSettings", "load_settings", "settings_from_document"),
    },
)
