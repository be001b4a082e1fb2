"""``python -m fastapi_wallet.migrate``: the framework's tables (eventlog, scheduled_tasks) and
the wallet's own (wallets, handled_deposits, top_up_runs, wallet_receipts: every table of
``fastapi_wallet.domain.Base``), before the application is started."""

from __future__ import annotations

from ekbatan.core import DatabaseRegistry, load_settings, migrate
from fastapi_wallet.app import CONFIG
from fastapi_wallet.domain import Base


def main() -> None:
    settings = load_settings(CONFIG)
    for report in migrate(settings):
        print(report)
    registry = DatabaseRegistry.from_config(settings)
    try:
        Base.metadata.create_all(registry.primary().engine)
    finally:
        registry.close()


if __name__ == "__main__":
    main()
