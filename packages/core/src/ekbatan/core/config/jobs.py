"""``ekbatan.jobs``: the three scheduler knobs (each optional; unset means the builder default)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import ConfigDict, field_validator

from ekbatan.core.config.durations import IsoDuration, format_iso_duration
from ekbatan.core.config.key_folding import KeyFoldingModel

DEFAULT_POLLING_INTERVAL = timedelta(seconds=10)
DEFAULT_HEARTBEAT_INTERVAL = timedelta(seconds=10)
DEFAULT_SHUTDOWN_MAX_WAIT = timedelta(minutes=30)


class JobsConfig(KeyFoldingModel):
    """``polling-interval`` > 0, ``heartbeat-interval`` > 0, ``shutdown-max-wait`` ≥ 0 (ISO-8601)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    polling_interval: IsoDuration | None = None
    heartbeat_interval: IsoDuration | None = None
    shutdown_max_wait: IsoDuration | None = None

    @field_validator("polling_interval")
    @classmethod
    def _polling_positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(
                f"must be positive, got {format_iso_duration(value)}: a zero or negative polling interval "
                f"would poll the database in a tight loop; write e.g. PT10S"
            )
        return value

    @field_validator("heartbeat_interval")
    @classmethod
    def _heartbeat_positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(
                f"must be positive, got {format_iso_duration(value)}: executions are declared dead after "
                f"heartbeat-interval × missed heartbeats; write e.g. PT10S"
            )
        return value

    @field_validator("shutdown_max_wait")
    @classmethod
    def _shutdown_not_negative(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(0):
            raise ValueError(
                f"must not be negative, got {format_iso_duration(value)}; write PT0S not to wait, or e.g. PT30S"
            )
        return value
