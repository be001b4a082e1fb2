"""The FastAPI application: ``uvicorn fastapi_wallet.app:app --workers 2``.

Importing this module builds nothing: each worker builds and starts Ekbatan in its lifespan.
"""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from pathlib import Path

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel

from ekbatan.integrations.fastapi import (
    ActionExecutorDep,
    SchedulerClientDep,
    ekbatan_lifespan,
    health_router,
    metrics_router,
    run_action,
    schedule_task,
)
from fastapi_wallet.domain import Deposit, DepositParams, Receipt, SendReceipt

CONFIG = Path(__file__).with_name("application.yml")

app = FastAPI(lifespan=ekbatan_lifespan(CONFIG, ["fastapi_wallet"]))
app.include_router(health_router())
app.include_router(metrics_router())


@app.middleware("http")
async def worker_pid(request: Request, call_next: object) -> Response:
    # which worker answered: each worker process serves its own counters at /metrics
    response: Response = await call_next(request)  # type: ignore[operator]
    response.headers["X-Worker-Pid"] = str(os.getpid())
    return response


class DepositBody(BaseModel):
    amount: Decimal


@app.post("/wallets/{wallet_id}/deposits")
async def deposit(
    wallet_id: uuid.UUID, body: DepositBody, executor: ActionExecutorDep, scheduler: SchedulerClientDep
) -> dict[str, object]:
    balance = await run_action(executor, Deposit, DepositParams(wallet_id=wallet_id, amount=body.amount))
    # a receipt for this deposit, sent by whichever worker picks it; the deposit's id is the
    # instance id, so that each deposit has its own receipt
    deposit_id = str(uuid.uuid4())
    receipt = SendReceipt.instance(deposit_id, Receipt(wallet_id=wallet_id, amount=body.amount))
    scheduled = await schedule_task(scheduler, receipt)
    return {
        "balance": str(balance),
        "deposit_id": deposit_id,
        "receipt_scheduled": scheduled,
        "pid": os.getpid(),
    }
