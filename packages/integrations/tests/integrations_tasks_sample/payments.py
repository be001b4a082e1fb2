"""A one-time task as a class: its constructor gets Ekbatan's database registry, and its
``async def execute`` writes one row per run into the application's database, so that runs can
be counted across processes."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ekbatan.core import DatabaseRegistry
from ekbatan.distributed_jobs import TaskHandler, one_time_task
from ekbatan.distributed_jobs.scheduler import PRIORITY_HIGH, ExecutionContext, TaskInstance

metadata = sa.MetaData()
task_payments = sa.Table(
    "task_payments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # no unique key: a second run of one instance must show as a second row
    sa.Column("instance_id", sa.String(100), nullable=False),
    sa.Column("amount_cents", sa.Integer, nullable=False),
    sa.Column("picked_by", sa.String(200)),
)


@dataclass
class Payment:
    amount_cents: int


@one_time_task("record-payment", priority=PRIORITY_HIGH)
class RecordPayment(TaskHandler[Payment]):
    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self.database_registry = database_registry

    async def execute(self, instance: TaskInstance[Payment], ctx: ExecutionContext) -> None:
        payment = instance.data
        assert isinstance(payment, Payment), f"data decoded as {type(payment).__name__}"
        with self.database_registry.transaction() as connection:
            connection.execute(
                task_payments.insert().values(
                    instance_id=instance.id,
                    amount_cents=payment.amount_cents,
                    picked_by=ctx.execution.picked_by,
                )
            )
