"""Shards: ``ShardIdentifier``, ``ShardedUUID``, the ``ekbatan.sharding`` settings and ``DatabaseRegistry``."""

from ekbatan.core.sharding.config import (
    DefaultShardConfig,
    GroupConfig,
    MemberConfig,
    ShardingConfig,
    target_name,
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
    "JobsPoolNotConfiguredError",
    "MemberConfig",
    "ShardIdentifier",
    "ShardedUUID",
    "ShardingConfig",
    "jobs_config_path",
    "jobs_connection_provider",
    "resolve_jobs_config",
    "target_name",
]
