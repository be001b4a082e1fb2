"""A recurring top-up job: needs the action executor, which Ekbatan offers by name and type."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

from ekbatan.core import ActionExecutor
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job
from integrations_sample.domain import Deposit, DepositParams

TOP_UP_WALLET = uuid.UUID("00000000-0000-4000-8000-000000000001")


@distributed_job
class TopUpJob(DistributedJob):
    def __init__(self, executor: ActionExecutor) -> None:
        self.executor = executor

    def name(self) -> str:
        return "wallet-top-up"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(milliseconds=200))

    def execute(self, ctx: JobContext) -> None:
        self.executor.execute(
            Deposit(), DepositParams(wallet_id=TOP_UP_WALLET, owner="top-up", amount=Decimal(10))
        )
