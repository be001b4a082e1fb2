"""Shards: ``ShardIdentifier``, ``ShardedUUID``, the ``ekbatan.sharding`` settings and ``DatabaseRegistry``."""

from typing import TYPE_CHECKING

from ekbatan.core.lazy_exports import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.sharding.config import (
        JOBS_CONFIG,
        PRIMARY_CONFIG,
        DefaultShardConfig,
        GroupConfig,
        MemberConfig,
        ShardingConfig,
        target_name,
    )
    from ekbatan.core.sharding.config import (
        config_path as pool_config_key,
    )
    from ekbatan.core.sharding.jobs_pool import (
        JobsPoolNotConfiguredError,
        jobs_config_path,
        jobs_connection_provider,
        resolve_jobs_config,
    )
    from ekbatan.core.sharding.registry import DatabaseRegistry
    from ekbatan.core.sharding.shard_identifier import ShardIdentifier
    from ekbatan.core.sharding.sharded_uuid import ShardedUUID

__all__ = [
    "DatabaseRegistry",
    "DefaultShardConfig",
    "GroupConfig",
    "JOBS_CONFIG",
    "JobsPoolNotConfiguredError",
    "MemberConfig",
    "PRIMARY_CONFIG",
    "ShardIdentifier",
    "ShardedUUID",
    "ShardingConfig",
    "jobs_config_path",
    "jobs_connection_provider",
    "pool_config_key",
    "resolve_jobs_config",
    "target_name",
]

__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ekbatan.core.sharding.config": (
            "DefaultShardConfig",
            "GroupConfig",
            "MemberConfig",
            "ShardingConfig",
            "target_name",
            "JOBS_CONFIG",
            "PRIMARY_CONFIG",
            "config_path as pool_config_key",
        ),
        "ekbatan.core.sharding.jobs_pool": (
            "JobsPoolNotConfiguredError",
            "jobs_config_path",
            "jobs_connection_provider",
            "resolve_jobs_config",
        ),
        "ekbatan.core.sharding.registry": ("DatabaseRegistry",),
        "ekbatan.core.sharding.shard_identifier": ("ShardIdentifier",),
        "ekbatan.core.sharding.sharded_uuid": ("ShardedUUID",),
    },
)
