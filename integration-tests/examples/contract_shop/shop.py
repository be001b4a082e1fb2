"""The contract shop: a job, a task, an action and two handlers (see the package's docstring)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, ModelEvent, action
from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    Schedule,
    Schedules,
    distributed_job,
    one_time_task,
)
from ekbatan.distributed_jobs.scheduler import ExecutionContext, TaskInstance
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


def record(line: str) -> None:
    # one write(2) per line, appended: lines from several processes never interleave
    descriptor = os.open(os.environ["CONTRACT_SHOP_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{line}\n".encode())
    finally:
        os.close(descriptor)


class Base(DeclarativeBase):
    pass


class ContractOrder(Base):
    __tablename__ = "contract_orders"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    total: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))


class ContractOrderPlaced(ModelEvent):
    total: Decimal


class OrderParams(BaseModel):
    order_id: uuid.UUID
    total: Decimal


@action
class PlaceContractOrder(Action[OrderParams, None]):
    def perform(self, principal: Any, params: OrderParams) -> None:
        order = ContractOrder(id=params.order_id, total=params.total)
        self.plan.add(order, ContractOrderPlaced(total=params.total))


@event_handler
class Mailer(EventHandler[ContractOrderPlaced]):
    def name(self) -> str:
        return "contract-mailer"

    def event_type(self) -> type[ContractOrderPlaced]:
        return ContractOrderPlaced

    def handle(self, envelope: EventEnvelope[ContractOrderPlaced]) -> None:
        record(f"mailed {envelope.event.model_id}")


@event_handler
class Ledger(EventHandler[ContractOrderPlaced]):
    def name(self) -> str:
        return "contract-ledger"

    def event_type(self) -> type[ContractOrderPlaced]:
        return ContractOrderPlaced

    def handle(self, envelope: EventEnvelope[ContractOrderPlaced]) -> None:
        record(f"booked {envelope.event.model_id}")


@distributed_job
class Tick(DistributedJob):
    def name(self) -> str:
        return "contract-tick"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        record("ticked")


@dataclass
class Receipt:
    order: str
    cents: int


@one_time_task("contract-receipt", data_type=Receipt)
def send_receipt(instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None:
    data = instance.data
    record(f"receipt {data.order} {data.cents} {type(data).__name__}")
