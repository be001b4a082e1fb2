"""``python -m ekbatan.integrations.demo [--url URL]``."""

from __future__ import annotations

import argparse
import sys

from ekbatan.integrations.demo.run import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ekbatan demo", description=__doc__)
    parser.add_argument("--url", help="a PostgreSQL or MariaDB URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--orders", type=int, default=100)
    args = parser.parse_args(argv)
    result = run_demo(args.url, workers=args.workers, tasks=args.tasks, orders=args.orders)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
