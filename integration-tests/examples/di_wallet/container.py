"""``WalletContainer``: Ekbatan's container with the application's settings, packages and services."""

from __future__ import annotations

import os
from pathlib import Path

from dependency_injector import providers

from di_wallet.handlers import DepositTally
from ekbatan.integrations.di import EkbatanContainer

CONFIG = Path(__file__).with_name("application.yml")


class WalletContainer(EkbatanContainer):
    config_path = providers.Object(os.environ.get("DI_WALLET_CONFIG", str(CONFIG)))
    packages = providers.Object(["di_wallet"])

    # DepositCounter's ``tally`` parameter is resolved by this provider's name
    tally = providers.Singleton(DepositTally, EkbatanContainer.database_registry)
