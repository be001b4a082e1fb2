"""Re-imports a task defined elsewhere: discovery finds it once, where it is defined."""

from __future__ import annotations

from integrations_tasks_sample.payments import RecordPayment
from integrations_tasks_sample.receipts import send_receipt

__all__ = ["RecordPayment", "send_receipt"]
