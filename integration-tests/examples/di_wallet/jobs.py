"""The recurring top-up job: every second, ten into the house wallet."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal

import sqlalchemy as sa

from di_wallet.domain import Deposit, DepositParams, TopUpRun
from ekbatan.core import ActionExecutor, DatabaseRegistry
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job

HOUSE_WALLET = uuid.UUID("00000000-0000-4000-8000-00000000d1d1")


@distributed_job
class TopUpJob(DistributedJob):
    # both parameters are Ekbatan's own objects, offered to discovered classes by name and type
    def __init__(self, executor: ActionExecutor, database_registry: DatabaseRegistry) -> None:
        self.executor = executor
        self.database_registry = database_registry

    def name(self) -> str:
        return "di-wallet-top-up"

    def schedule(self) -> Schedule:
        return Schedules.cron("* * * * * *")  # every second: one slot per second

    def execute(self, ctx: JobContext) -> None:
        self.executor.execute(
            Deposit, DepositParams(wallet_id=HOUSE_WALLET, owner="house", amount=Decimal(10))
        )
        with self.database_registry.transaction() as connection:
            connection.execute(sa.insert(TopUpRun).values(execution_time=ctx.execution_time, pid=os.getpid()))
