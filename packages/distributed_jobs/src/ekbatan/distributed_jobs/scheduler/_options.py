"""What a :class:`SchedulerBuilder` fixes when it builds a scheduler, and the scheduler's default
name."""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ekbatan.distributed_jobs.scheduler._clock import Clock
from ekbatan.distributed_jobs.scheduler._history.records import HistorySettings
from ekbatan.distributed_jobs.scheduler._liveness.outage import OutagePolicy
from ekbatan.distributed_jobs.scheduler._observability import ExecutionInterceptor, SchedulerListener
from ekbatan.distributed_jobs.scheduler._polling.strategy_config import PollingStrategyConfig
from ekbatan.distributed_jobs.scheduler._serializers import Serializer
from ekbatan.distributed_jobs.scheduler._tasks.kinds import Task
from ekbatan.distributed_jobs.scheduler._telemetry.settings import TelemetrySettings

# the scheduler's logger: the name lookup below is part of starting one
log = logging.getLogger("ekbatan.distributed_jobs.scheduler.scheduler")

MIN_MISSED_HEARTBEATS = 4
#: executions are dead after heartbeat interval × this many missed heartbeats, unless configured
DEFAULT_MISSED_HEARTBEATS = 6


#: what ``picked_by`` holds (db-scheduler's ``varchar(50)``)
MAX_NAME_LENGTH = 50


def default_scheduler_name() -> str:
    """``<host>-<pid>``: unique per process (several workers of one host are told apart in
    ``picked_by`` and the logs) and readable; the host part is cut to fit 50 characters, never
    the process id."""
    started = time.monotonic()
    try:
        host = socket.gethostname() or "failed.hostname.lookup"
    except OSError:
        host = "failed.hostname.lookup"
    if time.monotonic() - started > 1.0:
        log.warning("looking up the host name took over a second; consider .scheduler_name(...)")
    pid = f"-{os.getpid()}"
    return host[: MAX_NAME_LENGTH - len(pid)] + pid


@dataclass(frozen=True)
class SchedulerOptions:
    """What a :class:`SchedulerBuilder` was told, fixed when it builds the scheduler."""

    engine: sa.Engine
    startup_tasks: tuple[Task[Any], ...]
    threads: int
    polling_interval: timedelta
    heartbeat_interval: timedelta
    missed_heartbeats_limit: int
    shutdown_max_wait: timedelta
    delete_unresolved_after: timedelta
    immediate_execution: bool
    priority: bool
    strategy: PollingStrategyConfig
    name: str | None
    table_name: str
    serializer: Serializer
    clock: Clock
    listeners: tuple[SchedulerListener, ...]
    interceptors: tuple[ExecutionInterceptor, ...]
    failure_log_level: int
    failure_log_stack_trace: bool
    shutdown_hook: bool
    batch_completions: bool
    listen_notify: bool
    outage: OutagePolicy
    history: HistorySettings | None = None
    telemetry: TelemetrySettings | None = None
