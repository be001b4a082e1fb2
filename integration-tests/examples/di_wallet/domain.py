"""The wallet's tables, its event and its action."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, ModelEvent, action


class Base(DeclarativeBase):
    pass


class Wallet(Base):
    __tablename__ = "di_wallets"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(50))
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(14, 2))


class DepositTallied(Base):
    """One row per deposit event the handler counted (its event id is the key: at least once
    delivery may hand an event over twice, the tally counts it once)."""

    __tablename__ = "di_deposit_tally"

    event_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    wallet_id: Mapped[str] = mapped_column(sa.String(64))
    amount: Mapped[Decimal] = mapped_column(sa.Numeric(14, 2))
    pid: Mapped[int]


class TopUpRun(Base):
    """One row per run of the recurring top-up job: its slot and the process that ran it."""

    __tablename__ = "di_top_up_runs"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    execution_time: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    pid: Mapped[int]


class MoneyDeposited(ModelEvent):
    amount: Decimal


class DepositParams(BaseModel):
    wallet_id: uuid.UUID
    owner: str = "someone"
    amount: Decimal


@action
class Deposit(Action[DepositParams, Decimal]):
    """Credit a wallet (opening it on first use) and record ``MoneyDeposited`` with it."""

    def perform(self, principal: Any, params: DepositParams) -> Decimal:
        session = self.plan.session()
        wallet = session.get(Wallet, params.wallet_id)
        if wallet is None:
            wallet = Wallet(id=params.wallet_id, owner=params.owner, balance=params.amount)
            self.plan.add(wallet, MoneyDeposited(amount=params.amount))
        else:
            wallet.balance += params.amount
            self.plan.update(wallet, MoneyDeposited(amount=params.amount))
        return wallet.balance
