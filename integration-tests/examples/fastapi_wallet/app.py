"""The FastAPI application: ``uvicorn fastapi_wallet.app:app --workers 2``.

Importing this module builds nothing: each worker builds and starts Ekbatan in its lifespan.
"""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from pathlib import Path

from fastapi import FastAPI
from pydantic import BaseModel

from ekbatan.integrations.fastapi import ActionExecutorDep, ekbatan_lifespan, health_router, run_action
from fastapi_wallet.domain import Deposit, DepositParams

CONFIG = Path(__file__).with_name("application.yml")

app = FastAPI(lifespan=ekbatan_lifespan(CONFIG, ["fastapi_wallet"]))
app.include_router(health_router())


class DepositBody(BaseModel):
    amount: Decimal


@app.post("/wallets/{wallet_id}/deposits")
async def deposit(wallet_id: uuid.UUID, body: DepositBody, executor: ActionExecutorDep) -> dict[str, object]:
    balance = await run_action(executor, Deposit, DepositParams(wallet_id=wallet_id, amount=body.amount))
    return {"balance": str(balance), "pid": os.getpid()}
