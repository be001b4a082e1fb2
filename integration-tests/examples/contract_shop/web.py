"""The contract shop as a FastAPI application, for a real server: its application.yml and
packages come from ``$CONTRACT_SHOP_CONFIG`` and ``$CONTRACT_SHOP_PACKAGES``."""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from typing import Any

from fastapi import FastAPI

from contract_shop.shop import OrderParams, PlaceContractOrder, Receipt, send_receipt
from ekbatan.integrations.fastapi import (
    ActionExecutorDep,
    EkbatanRuntimeDep,
    SchedulerClientDep,
    ekbatan_lifespan,
    run_action,
    schedule_task,
)
from ekbatan.integrations.options import EkbatanOptions

OPTIONS = EkbatanOptions(
    config=os.environ.get("CONTRACT_SHOP_CONFIG", "application.yml"),
    packages=os.environ.get("CONTRACT_SHOP_PACKAGES", "contract_shop"),
)
app = FastAPI(lifespan=ekbatan_lifespan(options=OPTIONS))


@app.get("/built")
async def built(runtime: EkbatanRuntimeDep) -> dict[str, list[str]]:
    return {
        "actions": sorted(cls.__name__ for cls in runtime.discovered.actions),
        "handlers": sorted(runtime.event_handler_registry.handler_names()),
        "jobs": sorted(job.name() for job in runtime.jobs),
        "tasks": sorted(task.name for task in runtime.tasks),
    }


@app.post("/orders")
async def order(executor: ActionExecutorDep, client: SchedulerClientDep) -> dict[str, Any]:
    order_id = uuid.uuid4()
    await run_action(executor, PlaceContractOrder(), OrderParams(order_id=order_id, total=Decimal("19.99")))
    await schedule_task(client, send_receipt.instance(str(order_id), Receipt(str(order_id), 1999)))
    return {"order": str(order_id)}
