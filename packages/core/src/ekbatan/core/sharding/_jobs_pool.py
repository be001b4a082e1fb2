"""Which pool the scheduler (distributed jobs) uses: the default shard's ``jobs-config``.

Rule: the member named by ``default-shard`` supplies the jobs pool through its ``jobs-config``
slot. Other members' ``jobs-config`` entries are ignored. When the default member has no
``jobs-config``, the scheduler falls back to that member's ``primary-config`` and a WARNING
names the key to add; ``strict=True`` turns the fallback into an error instead.
"""

from __future__ import annotations

import difflib
import logging
from typing import Any

from ekbatan.core.config._key_folding import kebab_spelling
from ekbatan.core.persistence._connection_provider import ConnectionProvider
from ekbatan.core.persistence._data_source import DataSourceConfig
from ekbatan.core.sharding._config import (
    JOBS_CONFIG,
    PRIMARY_CONFIG,
    SECONDARY_CONFIG,
    MemberConfig,
    ShardingConfig,
    check_default_shard,
    pool_config_key,
)

log = logging.getLogger("ekbatan.core.sharding.jobs_pool")


class JobsPoolNotConfiguredError(LookupError):
    """The default shard has no ``jobs-config`` and the caller asked not to fall back."""


def jobs_config_path(sharding: ShardingConfig) -> str:
    """``ekbatan.sharding.groups[<g>].members[<m>].configs.jobs-config`` for the default shard."""
    check_default_shard(sharding)
    return pool_config_key(sharding, sharding.default, JOBS_CONFIG)


def misspelled_jobs_config_hint(member: MemberConfig) -> str:
    """``"; did you mean jobs-config instead of job-config?"`` when a slot's name is a near miss.

    Only a hint: slots with other names are legitimate (custom pools looked up with
    ``config_for``), so a near miss cannot be refused without refusing those too.
    """
    custom = [slot for slot in member.configs if slot not in (PRIMARY_CONFIG, SECONDARY_CONFIG, JOBS_CONFIG)]
    # 0.8: catches job-config, jobsconfig, jobs-conifg; leaves reporting-config and the like alone
    close = difflib.get_close_matches(JOBS_CONFIG, custom, n=1, cutoff=0.8)
    if not close:
        return ""
    return f"; did you mean jobs-config instead of {kebab_spelling(close[0])}?"


def _default_member(sharding: ShardingConfig) -> MemberConfig:
    check_default_shard(sharding)
    member = sharding.member_for(sharding.default)
    assert member is not None  # check_default_shard guarantees it
    return member


def jobs_pool_missing_message(sharding: ShardingConfig) -> str:
    return (
        f"no jobs pool: {jobs_config_path(sharding)} is not set"
        f"{misspelled_jobs_config_hint(_default_member(sharding))}. The scheduler polls continuously and "
        f"needs a dedicated small pool on the default shard {sharding.default}; add it (e.g. the primary's "
        f"url with maximum-pool-size: 2), or pass your own ConnectionProvider to the JobRegistry"
    )


def resolve_jobs_config(sharding: ShardingConfig, *, strict: bool = False) -> tuple[DataSourceConfig, bool]:
    """The settings of the jobs pool and whether they are a fallback to ``primary-config``."""
    member = _default_member(sharding)
    configured = member.config_for(JOBS_CONFIG)
    if configured is not None:
        return configured, False
    if strict:
        raise JobsPoolNotConfiguredError(jobs_pool_missing_message(sharding))
    log.warning(
        "%s is not set%s; the scheduler will use the default shard's primary-config instead. "
        "Add a jobs-config with a small maximum-pool-size so polling never competes with application queries",
        jobs_config_path(sharding),
        misspelled_jobs_config_hint(member),
    )
    return member.primary_config, True


def jobs_connection_provider(
    settings: ShardingConfig | Any, *, strict: bool = False, **extra_engine_options: Any
) -> ConnectionProvider:
    """A new, dedicated provider for the jobs pool (the caller closes it).

    Accepts the ``ekbatan`` settings or their ``sharding`` part. Without ``jobs-config`` the pool
    is built from the default member's ``primary-config`` (WARNING), or raises when ``strict``.
    """
    sharding = settings if isinstance(settings, ShardingConfig) else settings.sharding
    config, fallback = resolve_jobs_config(sharding, strict=strict)
    where = pool_config_key(sharding, sharding.default, PRIMARY_CONFIG if fallback else JOBS_CONFIG)
    return ConnectionProvider(config, name="jobs", config_path=where, **extra_engine_options)
