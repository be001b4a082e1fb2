"""The wallet's tables, its event, its action, its handler, its recurring job and its one-time
receipt task."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, DatabaseRegistry, ModelEvent, action
from ekbatan.distributed_jobs import (
    DistributedJob,
    JobContext,
    Schedule,
    Schedules,
    TaskHandler,
    distributed_job,
    one_time_task,
)
from ekbatan.distributed_jobs.scheduler import ExecutionContext, TaskInstance
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


class Base(DeclarativeBase):
    pass


class Wallet(Base):
    __tablename__ = "wallets"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))


class HandledDeposit(Base):
    """One row per call of the handler: at least once, so an event may appear twice."""

    __tablename__ = "handled_deposits"

    row: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    wallet_id: Mapped[str] = mapped_column(sa.String(64))
    pid: Mapped[int] = mapped_column(sa.Integer)


class TopUpRun(Base):
    """One row per run of the recurring job: (slot, process)."""

    __tablename__ = "top_up_runs"

    row: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    slot: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    pid: Mapped[int] = mapped_column(sa.Integer)


class ReceiptRun(Base):
    """One row per run of the receipt task: (instance id, data, process). Not unique on the
    instance id, so that a receipt run twice would show as two rows."""

    __tablename__ = "wallet_receipts"

    row: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    deposit_id: Mapped[str] = mapped_column(sa.String(64))
    wallet_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    amount: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))
    pid: Mapped[int] = mapped_column(sa.Integer)


class MoneyDeposited(ModelEvent):
    amount: Decimal


class DepositParams(BaseModel):
    wallet_id: uuid.UUID
    amount: Decimal


@action
class Deposit(Action[DepositParams, Decimal]):
    def perform(self, principal: Any, params: DepositParams) -> Decimal:
        session = self.plan.session()
        wallet = session.get(Wallet, params.wallet_id)
        if wallet is None:
            wallet = Wallet(id=params.wallet_id, balance=params.amount)
            self.plan.add(wallet, MoneyDeposited(amount=params.amount))
        else:
            wallet.balance += params.amount
            self.plan.update(wallet, MoneyDeposited(amount=params.amount))
        return wallet.balance


@event_handler
class DepositRecorder(EventHandler[MoneyDeposited]):
    # ``database_registry`` is one of the objects Ekbatan offers to discovered constructors
    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self.engine = database_registry.primary().engine

    def name(self) -> str:
        return "deposit-recorder"

    def event_type(self) -> type[MoneyDeposited]:
        return MoneyDeposited

    def handle(self, envelope: EventEnvelope[MoneyDeposited]) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                sa.insert(HandledDeposit).values(
                    event_id=envelope.event_id, wallet_id=envelope.event.model_id, pid=os.getpid()
                )
            )


@distributed_job
class TopUpRecorder(DistributedJob):
    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self.engine = database_registry.primary().engine

    def name(self) -> str:
        return "wallet-top-up-slots"

    def schedule(self) -> Schedule:
        return Schedules.cron("* * * * * *")  # every second: many slots for two workers to share

    def execute(self, ctx: JobContext) -> None:
        with self.engine.begin() as connection:
            connection.execute(sa.insert(TopUpRun).values(slot=ctx.execution_time, pid=os.getpid()))


@dataclass
class Receipt:
    """The receipt task's data: stored as JSON, decoded back into a ``Receipt`` for the task."""

    wallet_id: uuid.UUID
    amount: Decimal


@one_time_task("wallet-receipt")
class SendReceipt(TaskHandler[Receipt]):
    """A one-time task scheduled by the deposit endpoint, one instance per deposit (its id is
    the deposit's id): each instance runs once, in whichever worker picks it."""

    def __init__(self, database_registry: DatabaseRegistry) -> None:  # injected, as a job's
        self.engine = database_registry.primary().engine

    def execute(self, instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None:
        receipt = instance.data  # a Receipt, decoded with the task's data type
        with self.engine.begin() as connection:
            connection.execute(
                sa.insert(ReceiptRun).values(
                    deposit_id=instance.id,
                    wallet_id=receipt.wallet_id,
                    amount=receipt.amount,
                    pid=os.getpid(),
                )
            )
