"""Settings: ``application.yml`` under ``ekbatan:``, placeholders, env overrides, ISO-8601 durations."""

from typing import TYPE_CHECKING

from ekbatan.core import _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.config._durations import (
        DurationFormatError as DurationFormatError,
        IsoDuration as IsoDuration,
        format_iso_duration as format_iso_duration,
        parse_iso_duration as parse_iso_duration,
    )
    from ekbatan.core.config._environment import (
        EkbatanEnvironmentSource as EkbatanEnvironmentSource,
        EnvironmentOverrideError as EnvironmentOverrideError,
    )
    from ekbatan.core.config._errors import SettingsError as SettingsError
    from ekbatan.core.config._jobs import (
        JobsConfig as JobsConfig,
        JobsHistoryConfig as JobsHistoryConfig,
    )
    from ekbatan.core.config._key_folding import (
        fold_key as fold_key,
        kebab_spelling as kebab_spelling,
    )
    from ekbatan.core.config._local_event_handler import (
        HandlingConfig as HandlingConfig,
        LocalEventHandlerConfig as LocalEventHandlerConfig,
    )
    from ekbatan.core.config._observability import ObservabilityConfig as ObservabilityConfig
    from ekbatan.core.config._placeholders import expand_placeholders as expand_placeholders
    from ekbatan.core.config._settings import (
        EkbatanSettings as EkbatanSettings,
        load_settings as load_settings,
        settings_from_document as settings_from_document,
    )


__getattr__, __dir__, __all__ = _lazy_exports.lazy_exports(
    __name__,
    {
        "ekbatan.core.config._durations": (
            "DurationFormatError",
            "IsoDuration",
            "format_iso_duration",
            "parse_iso_duration",
        ),
        "ekbatan.core.config._environment": ("EkbatanEnvironmentSource", "EnvironmentOverrideError"),
        "ekbatan.core.config._errors": ("SettingsError",),
        "ekbatan.core.config._jobs": ("JobsConfig", "JobsHistoryConfig"),
        "ekbatan.core.config._key_folding": ("fold_key", "kebab_spelling"),
        "ekbatan.core.config._local_event_handler": ("HandlingConfig", "LocalEventHandlerConfig"),
        "ekbatan.core.config._observability": ("ObservabilityConfig",),
        "ekbatan.core.config._placeholders": ("expand_placeholders",),
        "ekbatan.core.config._settings": ("EkbatanSettings", "load_settings", "settings_from_document"),
    },
)
