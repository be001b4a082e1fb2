"""``python -m di_wallet [serve]``: run until SIGTERM or SIGINT; ``python -m di_wallet migrate``:
create Ekbatan's tables and the example's own, then exit (a deploy step, run before serving)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

from di_wallet.container import WalletContainer
from di_wallet.domain import Base
from ekbatan.core import migrate

log = logging.getLogger("di_wallet")


def run_migrations(container: WalletContainer) -> None:
    for report in migrate(container.settings()):
        log.info("migrated: %s", report)
    Base.metadata.create_all(container.database_registry().primary().engine)


def serve(container: WalletContainer) -> int:
    received: list[int] = []

    def note(signum: int, _frame: object) -> None:
        received.append(signum)  # only note it: the main loop below does the stopping

    # installed before starting, so a SIGTERM that arrives during start-up is not lost
    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        container.init_resources()
        print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
        while not received:
            time.sleep(0.05)
        log.info("received %s, stopping", signal.Signals(received[0]).name)
    finally:
        # a second signal during a long drain gets the default handling again
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        container.shutdown_resources()  # the job registry drains first, then the pools close
    print(json.dumps({"event": "stopped", "pid": os.getpid()}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m di_wallet")
    parser.add_argument("command", nargs="?", choices=("serve", "migrate"), default="serve")
    parser.add_argument("--config", help="application.yml to use (default: the one next to the package)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(process)d %(name)s %(message)s"
    )
    container = WalletContainer()
    if args.config:
        container.config_path.override(args.config)
    if args.command == "migrate":
        try:
            run_migrations(container)
        finally:
            container.shutdown_resources()
        return 0
    return serve(container)


if __name__ == "__main__":
    sys.exit(main())
