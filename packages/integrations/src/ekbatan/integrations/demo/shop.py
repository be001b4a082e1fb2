"""The demo's application: a small shop, written as an Ekbatan user would write one.

An action places an order and records ``DemoOrderPlaced``; two handlers react to it; two recurring
jobs (a fixed delay and a cron) and a one-time task do the background work. Everything that
runs writes one row to ``demo_log`` — what, which item, which worker — so the demo can prove
afterwards that everything ran, and where.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, DatabaseRegistry, ModelEvent, action
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job
from ekbatan.distributed_jobs.scheduler import ExecutionContext, TaskInstance, Tasks
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler

NODE_VARIABLE = "EKBATAN_DEMO_NODE"


def current_node() -> str:
    """Which worker this process is (the demo sets it when it starts the process)."""
    return os.environ.get(NODE_VARIABLE, "client")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "demo_orders"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    customer: Mapped[str] = mapped_column(sa.String(50))
    total: Mapped[Decimal] = mapped_column(sa.Numeric(10, 2))


demo_log = sa.Table(
    "demo_log",
    Base.metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("name", sa.String(50), nullable=False),
    sa.Column("item", sa.String(100), nullable=False),
    sa.Column("node", sa.String(20), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)


def log_run(engine: sa.Engine, kind: str, name: str, item: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            demo_log.insert().values(kind=kind, name=name, item=item, node=current_node(), at=time.time())
        )


class DemoOrderPlaced(ModelEvent):
    customer: str
    total: Decimal


class PlaceOrderParams(BaseModel):
    customer: str
    total: Decimal


@action
class PlaceOrder(Action[PlaceOrderParams, uuid.UUID]):
    def perform(self, principal: Any, params: PlaceOrderParams) -> uuid.UUID:
        order = Order(id=uuid.uuid4(), customer=params.customer, total=params.total)
        self.plan.add(order, DemoOrderPlaced(customer=params.customer, total=params.total))
        return order.id


class _LoggingHandler(EventHandler[DemoOrderPlaced]):
    handler_name = ""

    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self._engine = database_registry.primary().engine

    def name(self) -> str:
        return self.handler_name

    def event_type(self) -> type[DemoOrderPlaced]:
        return DemoOrderPlaced

    def handle(self, envelope: EventEnvelope[DemoOrderPlaced]) -> None:
        log_run(self._engine, "handler", self.handler_name, str(envelope.event_id))


@event_handler
class ReceiptMailer(_LoggingHandler):
    handler_name = "receipt-mailer"


@event_handler
class LoyaltyPoints(_LoggingHandler):
    handler_name = "loyalty-points"


class _LoggingJob(DistributedJob):
    job_name = ""

    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self._engine = database_registry.primary().engine

    def name(self) -> str:
        return self.job_name

    def execute(self, ctx: JobContext) -> None:
        # the slot is the row's execution time: one run per slot across the cluster
        log_run(self._engine, "recurring", self.job_name, ctx.execution_time.isoformat())


@distributed_job
class InventorySync(_LoggingJob):
    job_name = "inventory-sync"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(seconds=1))


@distributed_job
class SalesReport(_LoggingJob):
    job_name = "sales-report"

    def schedule(self) -> Schedule:
        return Schedules.cron("*/2 * * * * *")  # every 2 seconds (seconds first, Spring style)


_task_engine: sa.Engine | None = None


def bind_one_time_tasks(engine: sa.Engine) -> None:
    """Where the one-time task writes its log rows (the worker calls this once)."""
    global _task_engine
    _task_engine = engine


def _send_invoice(instance: TaskInstance[dict[str, Any]], ctx: ExecutionContext) -> None:
    assert _task_engine is not None, "bind_one_time_tasks() was not called"
    log_run(_task_engine, "one-time", "send-invoice", instance.id)


send_invoice = Tasks.one_time("send-invoice", data_type=dict).execute(_send_invoice)
