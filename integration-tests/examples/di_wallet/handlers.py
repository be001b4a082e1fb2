"""The handler: counts every deposit into ``di_deposit_tally`` through the ``tally`` service."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal

import sqlalchemy as sa

from di_wallet.domain import DepositTallied, MoneyDeposited
from ekbatan.core import DatabaseRegistry
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


class DepositTally:
    """The application's own service; ``WalletContainer.tally`` provides it."""

    def __init__(self, database_registry: DatabaseRegistry) -> None:
        self.database_registry = database_registry

    def count(self, event_id: uuid.UUID, wallet_id: str, amount: Decimal) -> None:
        try:
            with self.database_registry.transaction() as connection:
                connection.execute(
                    sa.insert(DepositTallied).values(
                        event_id=event_id, wallet_id=wallet_id, amount=amount, pid=os.getpid()
                    )
                )
        except sa.exc.IntegrityError:
            pass  # counted already: delivery is at least once, the event id makes it count once


@event_handler
class DepositCounter(EventHandler[MoneyDeposited]):
    def __init__(self, tally: DepositTally) -> None:
        self.tally = tally

    def name(self) -> str:
        return "deposit-counter"

    def event_type(self) -> type[MoneyDeposited]:
        return MoneyDeposited

    def handle(self, envelope: EventEnvelope[MoneyDeposited]) -> None:
        self.tally.count(envelope.event_id, envelope.event.model_id or "", envelope.event.amount)
