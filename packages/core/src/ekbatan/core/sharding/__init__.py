"""Shards: ``ShardIdentifier``, ``ShardedUUID``, the ``ekbatan.sharding`` settings and ``DatabaseRegistry``."""

from typing import TYPE_CHECKING

from ekbatan.core import _lazy_exports

if TYPE_CHECKING:
    from ekbatan.core.sharding._config import (
        JOBS_CONFIG as JOBS_CONFIG,
        PRIMARY_CONFIG as PRIMARY_CONFIG,
        DefaultShardConfig as DefaultShardConfig,
        GroupConfig as GroupConfig,
        MemberConfig as MemberConfig,
        ShardingConfig as ShardingConfig,
        pool_config_key as pool_config_key,
        target_name as target_name,
    )
    from ekbatan.core.sharding._jobs_pool import (
        JobsPoolNotConfiguredError as JobsPoolNotConfiguredError,
        jobs_config_path as jobs_config_path,
        jobs_connection_provider as jobs_connection_provider,
        resolve_jobs_config as resolve_jobs_config,
    )
    from ekbatan.core.sharding._registry import DatabaseRegistry as DatabaseRegistry
    from ekbatan.core.sharding._shard_identifier import ShardIdentifier as ShardIdentifier
    from ekbatan.core.sharding._sharded_uuid import ShardedUUID as ShardedUUID


__getattr__, __dir__, __all__ = _lazy_exports.lazy_exports(
    __name__,
    {
        "ekbatan.core.sharding._config": (
            "DefaultShardConfig",
            "GroupConfig",
            "MemberConfig",
            "ShardingConfig",
            "target_name",
            "JOBS_CONFIG",
            "PRIMARY_CONFIG",
            "pool_config_key",
        ),
        "ekbatan.core.sharding._jobs_pool": (
            "JobsPoolNotConfiguredError",
            "jobs_config_path",
            "jobs_connection_provider",
            "resolve_jobs_config",
        ),
        "ekbatan.core.sharding._registry": ("DatabaseRegistry",),
        "ekbatan.core.sharding._shard_identifier": ("ShardIdentifier",),
        "ekbatan.core.sharding._sharded_uuid": ("ShardedUUID",),
    },
)
