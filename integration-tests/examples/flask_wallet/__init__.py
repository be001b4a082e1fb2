"""A small wallet service wired with Ekbatan's Flask extension, deployed under gunicorn.

``create_app()`` is the application factory gunicorn and ``flask --app flask_wallet`` call.
The settings come from ``application.yml`` next to this file, whose database URL and eventlog
name come from the environment (``FLASK_WALLET_DB_URL``, ``FLASK_WALLET_EVENTLOG``); any
``FLASK_EKBATAN_*`` variable overrides the matching ``EKBATAN_*`` key of ``app.config``.
"""

from __future__ import annotations

import os
import uuid
from decimal import Decimal
from pathlib import Path

from flask import Flask, Response, request

from ekbatan.integrations.flask import Ekbatan
from flask_wallet.wallet import Deposit, DepositParams

ekbatan = Ekbatan()


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["EKBATAN_CONFIG"] = str(Path(__file__).with_name("application.yml"))
    app.config["EKBATAN_PACKAGES"] = "flask_wallet"
    app.config.from_prefixed_env()
    ekbatan.init_app(app)
    app.register_blueprint(ekbatan.metrics_blueprint())

    @app.after_request
    def worker_pid(response: Response) -> Response:
        # which worker answered: each worker process serves its own counters at /metrics
        response.headers["X-Worker-Pid"] = str(os.getpid())
        return response

    @app.post("/deposits")
    def deposit() -> dict[str, object]:
        body = request.get_json()
        params = DepositParams(
            wallet_id=uuid.UUID(body["wallet"]), amount=Decimal(body["amount"]), deposit_id=body["deposit_id"]
        )
        balance = ekbatan.action_executor.execute(Deposit(), params)
        return {"balance": str(balance), "pid": os.getpid()}

    return app
