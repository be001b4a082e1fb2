"""The wallet domain: a deposit action and its event, a handler that records every deposit it
sees, and a top-up job that runs every second and records the slot it ran for."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, ActionExecutor, DatabaseRegistry, ModelEvent, action
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler

TOP_UP_WALLET = uuid.UUID("00000000-0000-4000-8000-00000000f1a5")


class Base(DeclarativeBase):
    pass


class Wallet(Base):
    __tablename__ = "fw_wallets"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))


class HandledDeposit(Base):
    """Every deposit event the handler saw, with the worker process that handled it."""

    __tablename__ = "fw_handled_deposits"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    deposit_id: Mapped[str] = mapped_column(sa.String(80))
    pid: Mapped[int] = mapped_column()


class TopUpRun(Base):
    """One row per run of the top-up job: the slot it ran for and the worker that ran it."""

    __tablename__ = "fw_top_up_runs"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    slot: Mapped[str] = mapped_column(sa.String(40))
    pid: Mapped[int] = mapped_column()


class MoneyDeposited(ModelEvent):
    amount: Decimal
    deposit_id: str


class DepositParams(BaseModel):
    wallet_id: uuid.UUID
    amount: Decimal
    deposit_id: str


@action
class Deposit(Action[DepositParams, Decimal]):
    def perform(self, principal: Any, params: DepositParams) -> Decimal:
        session = self.plan.session()
        wallet = session.get(Wallet, params.wallet_id)
        event = MoneyDeposited(amount=params.amount, deposit_id=params.deposit_id)
        if wallet is None:
            wallet = Wallet(id=params.wallet_id, balance=params.amount)
            self.plan.add(wallet, event)
        else:
            wallet.balance += params.amount
            self.plan.update(wallet, event)
        return wallet.balance


@event_handler
class DepositRecorder(EventHandler[MoneyDeposited]):
    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self.engine = database_registry.primary().engine

    def name(self) -> str:
        return "deposit-recorder"

    def event_type(self) -> type[MoneyDeposited]:
        return MoneyDeposited

    def handle(self, envelope: EventEnvelope[MoneyDeposited]) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                sa.insert(HandledDeposit).values(deposit_id=envelope.event.deposit_id, pid=os.getpid())
            )


@distributed_job
class TopUpJob(DistributedJob):
    def __init__(self, executor: ActionExecutor, database_registry: DatabaseRegistry) -> None:
        self.executor = executor
        self.engine = database_registry.primary().engine

    def name(self) -> str:
        return "wallet-top-up"

    def schedule(self) -> Schedule:
        return Schedules.cron("* * * * * *")

    def execute(self, ctx: JobContext) -> None:
        slot = ctx.execution_time.isoformat()
        with self.engine.begin() as connection:
            connection.execute(sa.insert(TopUpRun).values(slot=slot, pid=os.getpid()))
        self.executor.execute(
            Deposit(), DepositParams(wallet_id=TOP_UP_WALLET, amount=Decimal(1), deposit_id=f"top-up {slot}")
        )
