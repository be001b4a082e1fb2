"""A one-time task as a function: records the decoded data it was given."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

from ekbatan.distributed_jobs import one_time_task
from ekbatan.distributed_jobs.scheduler import ExecutionContext, OnFailureRetryLater, TaskInstance


@dataclass
class Receipt:
    order: str
    amount_cents: int


#: what send_receipt was given: (instance id, data) — the data as it was decoded
SENT: list[tuple[str, object]] = []
_LOCK = threading.Lock()


@one_time_task(
    "send-receipt", data_type=Receipt, on_failure=OnFailureRetryLater(timedelta(seconds=1)), max_retries=2
)
def send_receipt(instance: TaskInstance[Receipt], ctx: ExecutionContext) -> None:
    with _LOCK:
        SENT.append((instance.id, instance.data))
