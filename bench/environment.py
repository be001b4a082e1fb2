"""What a benchmark run records about what it measured: the machine (load, versions), the git
head, and the snapshot of the engine's source every worker imports."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import REPO_ROOT


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def server_versions(dbs: Sequence[str]) -> dict[str, str]:
    from testsupport import server_url

    out: dict[str, str] = {}
    for d in dbs:
        if d == "sqlite":
            import sqlite3

            out["sqlite"] = sqlite3.sqlite_version
            continue
        try:
            eng = sa.create_engine(server_url(d), poolclass=sa.NullPool)
            with eng.connect() as c:
                out[d] = str(c.exec_driver_sql("SELECT version()").scalar())
            eng.dispose()
        except Exception as exc:  # pragma: no cover - reported, not fatal
            out[d] = f"unavailable: {exc}"
    return out


def environment(dbs: Sequence[str]) -> dict[str, Any]:
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlalchemy": sa.__version__,
        "psycopg": _version("psycopg"),
        "pymysql": _version("PyMySQL"),
        "ekbatan_distributed_jobs": _version("ekbatan-distributed-jobs"),
        "git": git_head(),
        "servers": server_versions(dbs),
        "loadavg": loadavg(),
    }


def git_head() -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except Exception:
        return None


# ----------------------------------------------------------------------------- engine snapshot
ENGINE_SRC = REPO_ROOT / "packages" / "distributed_jobs" / "src"


def snapshot_engine(out: Path) -> dict[str, Any]:
    """Copy the engine's source as it is now and put the copy first on ``sys.path``.

    The engine is edited while benchmarks run; every worker process imports it afresh, so
    without a snapshot one run could measure several versions. Spawned workers inherit the
    parent's ``sys.path``. Call before anything imports ``ekbatan``.
    """
    import hashlib
    import shutil

    root = out / "engine-snapshot"
    if root.exists():
        shutil.rmtree(root)
    target = root / "ekbatan" / "distributed_jobs"
    shutil.copytree(
        ENGINE_SRC / "ekbatan" / "distributed_jobs",
        target,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    digest = hashlib.sha256()
    for path in sorted(target.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(target)).encode())
            digest.update(path.read_bytes())
    sys.path.insert(0, str(root))
    return {
        "path": str(root),
        "sha256": digest.hexdigest()[:16],
        "git": git_head(),
        "uncommitted_changes": engine_has_uncommitted_changes(),
    }


def engine_has_uncommitted_changes() -> bool:
    """Whether the engine's source differs from the commit checked out."""
    return bool(
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", str(ENGINE_SRC)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    )
