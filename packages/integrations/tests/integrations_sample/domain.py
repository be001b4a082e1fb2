"""The wallet's table, its event and its action."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, ModelEvent, action


class Base(DeclarativeBase):
    pass


class Wallet(Base):
    __tablename__ = "wallets"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(50))
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))


class SampleWalletCredited(ModelEvent):
    amount: Decimal


class DepositParams(BaseModel):
    wallet_id: uuid.UUID
    owner: str = "someone"
    amount: Decimal


@action
class Deposit(Action[DepositParams, Decimal]):
    def perform(self, principal: Any, params: DepositParams) -> Decimal:
        session = self.plan.session()
        wallet = session.get(Wallet, params.wallet_id)
        if wallet is None:
            wallet = Wallet(id=params.wallet_id, owner=params.owner, balance=Decimal(0))
            wallet.balance += params.amount
            self.plan.add(wallet, SampleWalletCredited(amount=params.amount))
        else:
            wallet.balance += params.amount
            self.plan.update(wallet, SampleWalletCredited(amount=params.amount))
        return wallet.balance


class NotMarked(Action[dict, None]):
    """Not marked with @action: never discovered."""

    def perform(self, principal: Any, params: dict) -> None:
        return None
