"""``ekbatan.local-event-handler`` (also ``localEventHandler``): the outbox pipeline's knobs.

Every value is optional; an unset one means the job builder's default (listed in the docs).
``handling.enabled`` defaults to false: events fan out, but no handler runs unless a node opts in.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from ekbatan.core.config._durations import IsoDuration, format_iso_duration
from ekbatan.core.config._key_folding import KeyFoldingModel


class HandlingConfig(KeyFoldingModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False


class LocalEventHandlerConfig(KeyFoldingModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fanout_poll_delay: IsoDuration | None = None
    fanout_batch_size: int | None = Field(default=None, gt=0)
    handling_poll_delay: IsoDuration | None = None
    handling_batch_size: int | None = Field(default=None, gt=0)
    handling_max_backoff_cap: IsoDuration | None = None
    handling_retention_window: IsoDuration | None = None
    #: a handler call still running after this counts as a failed try (absent: no timeout)
    handling_handler_timeout: IsoDuration | None = None
    handling: HandlingConfig = Field(default_factory=HandlingConfig)

    @field_validator("handling", mode="before")
    @classmethod
    def _null_means_defaults(cls, value: Any) -> Any:
        return HandlingConfig() if value is None else value

    @field_validator(
        "fanout_poll_delay",
        "handling_poll_delay",
        "handling_max_backoff_cap",
        "handling_retention_window",
        "handling_handler_timeout",
    )
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(f"must be positive, got {format_iso_duration(value)}; write e.g. PT1S")
        return value
