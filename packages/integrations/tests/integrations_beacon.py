"""A job given to an entry point as an instance (``extra_jobs``), not found by scanning, and a
scheduler customization whose effect a test can read back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules


class Beacon(DistributedJob):
    """Notes each run."""

    def __init__(self) -> None:
        self.runs: list[Any] = []

    def name(self) -> str:
        return "beacon"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(milliseconds=100))

    def execute(self, ctx: JobContext) -> None:
        self.runs.append(ctx.execution_time)


def three_threads(builder: Any) -> Any:
    return builder.threads(3)
