"""A mistake for the entry-point contract test: two jobs answering to one name."""

from __future__ import annotations

from datetime import timedelta

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job


@distributed_job
class FirstTick(DistributedJob):
    def name(self) -> str:
        return "contract-tick"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        return None


@distributed_job
class SecondTick(FirstTick):
    pass
