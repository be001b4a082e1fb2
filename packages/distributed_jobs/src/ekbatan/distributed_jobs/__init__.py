"""Distributed jobs: ``DistributedJob``, ``@distributed_job`` and the ``JobRegistry`` facade.

The scheduler engine underneath is ``ekbatan.distributed_jobs.scheduler``.
"""

from ekbatan.distributed_jobs.job import DistributedJob, JobContext, distributed_job, is_distributed_job
from ekbatan.distributed_jobs.registry import (
    DEFAULT_HEARTBEAT_INTERVAL,
    EngineProvider,
    JobRegistry,
    JobRegistryBuilder,
    JobRegistryError,
    JobsDatabaseUnavailableError,
)
from ekbatan.distributed_jobs.scheduler import Schedule, Schedules

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DistributedJob",
    "EngineProvider",
    "JobContext",
    "JobRegistry",
    "JobRegistryBuilder",
    "JobRegistryError",
    "JobsDatabaseUnavailableError",
    "Schedule",
    "Schedules",
    "distributed_job",
    "is_distributed_job",
]
