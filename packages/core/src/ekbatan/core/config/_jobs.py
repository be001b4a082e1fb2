"""``ekbatan.jobs``: the scheduler's knobs (each optional; unset means the builder default)."""

from __future__ import annotations

import re
from datetime import timedelta

from pydantic import ConfigDict, field_validator

from ekbatan.core.config._durations import IsoDuration, format_iso_duration
from ekbatan.core.config._key_folding import KeyFoldingModel

# No defaults here: an absent key is None and leaves the engine's own default alone (the engine
# owns them; docs/configuration.md lists them).
# The engine's own minimum (SchedulerBuilder.missed_heartbeats_limit), repeated here because
# settings load without the engine: refused at load, the error names the key and the file.
MIN_MISSED_HEARTBEATS_LIMIT = 4
#: the shapes of a misfire policy (the engine checks the argument when the registry is built)
_MISFIRE_FORM = re.compile(r"run_once|skip(\|[^|]+)?|run_all(\|[1-9][0-9]*)?", re.ASCII)


class JobsHistoryConfig(KeyFoldingModel):
    """``ekbatan.jobs.history``: the execution history (on unless ``enabled: false``); each
    retention a positive ISO-8601 duration, ``max-runs-per-task`` at least 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    succeeded_retention: IsoDuration | None = None
    failed_retention: IsoDuration | None = None
    max_runs_per_task: int | None = None
    keep_task_data: bool | None = None
    prune_interval: IsoDuration | None = None

    @field_validator("succeeded_retention", "failed_retention", "prune_interval")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(f"must be positive, got {format_iso_duration(value)}; write e.g. P7D or PT10M")
        return value

    @field_validator("max_runs_per_task")
    @classmethod
    def _at_least_one(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be at least 1, got {value}; leave it out for the default (100000)")
        return value


class JobsConfig(KeyFoldingModel):
    """``polling-interval`` > 0, ``heartbeat-interval`` > 0, ``shutdown-max-wait`` ≥ 0 (ISO-8601),
    ``missed-heartbeats-limit`` ≥ 4 (an execution is dead after heartbeat-interval × this)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    polling_interval: IsoDuration | None = None
    heartbeat_interval: IsoDuration | None = None
    shutdown_max_wait: IsoDuration | None = None
    missed_heartbeats_limit: int | None = None
    history: JobsHistoryConfig | None = None
    #: the misfire policy of every DistributedJob that names none itself (the engine reads the
    #: argument: the grace of ``skip|PT30S``, the limit of ``run_all|10``)
    misfire_policy: str | None = None

    @field_validator("misfire_policy")
    @classmethod
    def _a_misfire_form(cls, value: str | None) -> str | None:
        if value is not None and not _MISFIRE_FORM.fullmatch(value):
            raise ValueError(
                f"unrecognized misfire policy {value!r}; write run_once (the default), skip, skip|PT30S "
                "(skip a run more than the grace late), run_all or run_all|10 (catch up at most 10 missed slots)"
            )
        return value

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

    @field_validator("missed_heartbeats_limit")
    @classmethod
    def _at_least_the_minimum(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_MISSED_HEARTBEATS_LIMIT:
            raise ValueError(
                f"must be at least {MIN_MISSED_HEARTBEATS_LIMIT}, got {value}: an execution is declared dead "
                f"after heartbeat-interval × this many missed heartbeats, and fewer would revive runs that are "
                f"only slow to write one (leave it unset for the engine's default)"
            )
        return value
