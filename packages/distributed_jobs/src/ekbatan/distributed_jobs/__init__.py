"""Distributed jobs: ``DistributedJob``, ``@distributed_job`` and the ``JobRegistry`` facade;
``@one_time_task`` and ``@recurring_task_with_persistent_schedule`` for engine tasks the
integrations discover; ``ClassMark`` and ``ValueMark``, the marks those decorators leave.

The scheduler engine underneath is ``ekbatan.distributed_jobs.scheduler``.
"""

from ekbatan.distributed_jobs.job import DistributedJob, JobContext, distributed_job, is_distributed_job
from ekbatan.distributed_jobs.marks import ClassMark, ValueMark
from ekbatan.distributed_jobs.registry import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_TASK_THREADS,
    EngineProvider,
    JobRegistry,
    JobRegistryBuilder,
    JobRegistryError,
    JobsDatabaseUnavailableError,
)
from ekbatan.distributed_jobs.scheduler import Schedule, Schedules
from ekbatan.distributed_jobs.stop_signals import StopSignals
from ekbatan.distributed_jobs.tasks import (
    TaskDefinition,
    TaskHandler,
    TaskMarker,
    TaskOptions,
    one_time_task,
    recurring_task_with_persistent_schedule,
    task_definition_of,
)

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_TASK_THREADS",
    "ClassMark",
    "DistributedJob",
    "EngineProvider",
    "JobContext",
    "JobRegistry",
    "JobRegistryBuilder",
    "JobRegistryError",
    "JobsDatabaseUnavailableError",
    "Schedule",
    "Schedules",
    "StopSignals",
    "TaskDefinition",
    "TaskHandler",
    "TaskMarker",
    "TaskOptions",
    "ValueMark",
    "distributed_job",
    "is_distributed_job",
    "one_time_task",
    "recurring_task_with_persistent_schedule",
    "task_definition_of",
]
