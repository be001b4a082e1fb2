"""A handler that counts deposits into a store the application's container provides."""

from __future__ import annotations

import threading
from decimal import Decimal

from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler
from integrations_sample.domain import SampleWalletCredited


class DepositLedger:
    """The application's own service, provided by its container."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deposits: list[tuple[str, Decimal]] = []

    def record(self, wallet: str, amount: Decimal) -> None:
        with self.lock:
            self.deposits.append((wallet, amount))


@event_handler
class DepositCounter(EventHandler[SampleWalletCredited]):
    def __init__(self, ledger: DepositLedger) -> None:
        self.ledger = ledger

    def name(self) -> str:
        return "deposit-counter"

    def event_type(self) -> type[SampleWalletCredited]:
        return SampleWalletCredited

    def handle(self, envelope: EventEnvelope[SampleWalletCredited]) -> None:
        self.ledger.record(envelope.event.model_id or "", envelope.event.amount)
