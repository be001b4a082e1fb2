"""Shared parts of the benchmarks: databases, table loading, worker processes, statistics,
results on disk.

Every benchmark works in throwaway ``bench_<random>`` databases (files for SQLite) that it
creates and drops itself, so a run never touches another engineer's data and two runs never
collide.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "out"
TASK_NAME = "bench"

#: the databases each benchmark supports, in report order
SERVER_DIALECTS = ("postgres", "mariadb")


# ----------------------------------------------------------------------------- settings
@dataclass
class Settings:
    """What one invocation of ``python -m bench`` asked for."""

    smoke: bool = False
    quick: bool = False
    dbs: tuple[str, ...] = ("postgres", "mariadb", "sqlite")
    repeats: int = 3
    out: Path = DEFAULT_OUT
    command: str = ""
    peers_python: Path | None = None
    allow_peer_install: bool = True
    procrastinate_jobs: int | None = None

    def size(self, full: int, quick: int, smoke: int) -> int:
        if self.smoke:
            return smoke
        if self.quick:
            return quick
        return full

    @property
    def mode(self) -> str:
        return "smoke" if self.smoke else "quick" if self.quick else "full"

    def wants(self, dialect: str) -> bool:
        return dialect in self.dbs


# ----------------------------------------------------------------------------- databases
@contextmanager
def scratch_database(dialect: str) -> Iterator[Any]:
    """A fresh, empty database (SQLite: a file) dropped afterwards."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from testsupport import create_isolated_database

    db = create_isolated_database(dialect, scope="database", prefix="bench")
    try:
        yield db
    finally:
        db.drop()


def pooled_engine(url: str, pool_size: int) -> sa.Engine:
    """A scheduler's or a client's engine, pooled as the product's ``ConnectionProvider`` pools
    it: on a server, connections idle for more than 0.5 s are pinged when taken (a SQLite file
    keeps SQLAlchemy's own pool and needs no check)."""
    if url.startswith("sqlite"):
        return sa.create_engine(url)
    from ekbatan.core.persistence import install_idle_ping

    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=0)
    install_idle_ping(engine)
    return engine


def create_scheduler_table(url: str) -> None:
    from ekbatan.distributed_jobs.scheduler import create_table

    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        create_table(engine)
    finally:
        engine.dispose()


def dialect_of(url: str) -> str:
    name = make_url(url).get_backend_name()
    return {"postgresql": "postgres", "mariadb": "mariadb", "mysql": "mariadb", "sqlite": "sqlite"}[name]


def raw_connect(url: str, autocommit: bool = True) -> Any:
    """A plain DB-API connection (psycopg 3, PyMySQL or sqlite3), no SQLAlchemy."""
    u = make_url(url)
    kind = dialect_of(url)
    if kind == "postgres":
        import psycopg

        return psycopg.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 5432,
            user=u.username or "postgres",
            dbname=u.database,
            autocommit=autocommit,
        )
    if kind == "mariadb":
        import pymysql

        conn = pymysql.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 3306,
            user=u.username or "root",
            password=u.password or "",
            database=u.database,
            autocommit=autocommit,
        )
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn
    import sqlite3

    conn = sqlite3.connect(u.database, isolation_level=None if autocommit else "DEFERRED", timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


def pg_conninfo(url: str) -> str:
    u = make_url(url)
    return f"host={u.host or '127.0.0.1'} port={u.port or 5432} user={u.username or 'postgres'} dbname={u.database}"


# ----------------------------------------------------------------------------- loading rows
def load_rows(
    url: str,
    count: int,
    *,
    due_in: timedelta = timedelta(seconds=-60),
    spread: timedelta = timedelta(0),
    prefix: str = "r",
    task_name: str = TASK_NAME,
    data: bytes | None = None,
    start: int = 0,
) -> float:
    """Insert ``count`` not-picked rows server-side (generate_series / the Sequence engine /
    a recursive CTE), due at ``now + due_in`` plus up to ``spread``; returns seconds taken.

    Instance ids are ``f"{prefix}{i}"`` for i in ``start+1 .. start+count``.
    """
    if count <= 0:
        return 0.0
    base = datetime.now(UTC) + due_in
    step_us = int(spread / timedelta(microseconds=1)) // max(count, 1)
    kind = dialect_of(url)
    began = time.perf_counter()
    conn = raw_connect(url, autocommit=False)
    try:
        cur = conn.cursor()
        if kind == "postgres":
            cur.execute(
                "INSERT INTO scheduled_tasks (task_name, task_instance, task_data, execution_time, picked, version) "
                "SELECT %s, %s || g, %s::bytea, %s::timestamptz + g * %s::bigint * interval '1 microsecond', false, 1 "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (task_name, prefix, data, base, step_us, start + 1, start + count),
            )
        elif kind == "mariadb":
            chunk = 1_000_000
            lo = start + 1
            while lo <= start + count:
                hi = min(lo + chunk - 1, start + count)
                cur.execute(
                    "INSERT INTO scheduled_tasks (task_name, task_instance, task_data, execution_time, picked, version) "
                    f"SELECT %s, CONCAT(%s, seq), %s, TIMESTAMPADD(MICROSECOND, seq * %s, %s), 0, 1 FROM seq_{lo}_to_{hi}",
                    (task_name, prefix, data, step_us, base.replace(tzinfo=None)),
                )
                lo = hi + 1
        else:
            base_ms = int(base.timestamp() * 1000)
            step_ms = max(step_us // 1000, 0)
            cur.execute(
                "WITH RECURSIVE g(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
                "INSERT INTO scheduled_tasks (task_name, task_instance, task_data, execution_time, picked, version) "
                "SELECT ?, ? || x, ?, ? + x * ?, 0, 1 FROM g",
                (start + 1, start + count, task_name, prefix, data, base_ms, step_ms),
            )
        conn.commit()
    finally:
        conn.close()
    return time.perf_counter() - began


def analyze(url: str) -> None:
    """Fresh planner statistics (and, on PostgreSQL, a visibility map) after a bulk load."""
    kind = dialect_of(url)
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        if kind == "postgres":
            cur.execute("VACUUM ANALYZE scheduled_tasks")
        elif kind == "mariadb":
            cur.execute("ANALYZE TABLE scheduled_tasks")
            cur.fetchall()
        else:
            cur.execute("ANALYZE")
    finally:
        conn.close()


def truncate(url: str) -> None:
    conn = raw_connect(url, autocommit=True)
    try:
        cur = conn.cursor()
        if dialect_of(url) == "sqlite":
            cur.execute("DELETE FROM scheduled_tasks")
        else:
            cur.execute("TRUNCATE TABLE scheduled_tasks")
    finally:
        conn.close()


def count_rows(conn: Any, where: str = "") -> int:
    cur = conn.cursor()
    cur.execute(f"SELECT count(*) FROM scheduled_tasks{where}")
    (n,) = cur.fetchone()
    if hasattr(cur, "close"):
        cur.close()
    return int(n)


# ----------------------------------------------------------------------------- PG counters
def pg_xact(url: str) -> dict[str, int]:
    """``pg_stat_database`` counters of the URL's database, read on a fresh connection."""
    conn = raw_connect(url)
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        row = cur.fetchone()
    finally:
        conn.close()
    keys = (
        "xact_commit",
        "xact_rollback",
        "tup_inserted",
        "tup_updated",
        "tup_deleted",
        "tup_returned",
        "tup_fetched",
    )
    return dict(zip(keys, (int(v) for v in row), strict=True))


def pg_xact_settled(url: str, wait: float = 0.3) -> dict[str, int]:
    """Counters once exited backends have flushed (read twice until stable, bounded)."""
    last = pg_xact(url)
    for _ in range(10):
        time.sleep(wait)
        now = pg_xact(url)
        if now == last:
            return now
        last = now
    return last


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


# ----------------------------------------------------------------------------- processes
def rss_kb(pid: int | None = None) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in kB, from /proc."""
    path = f"/proc/{pid or 'self'}/status"
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def wait_until_empty(
    url: str, expected: int, timeout: float, every: float = 0.05, where: str = "", stall: float = 30.0
) -> tuple[float, int, int]:
    """Poll ``count(*)`` every ``every`` s until 0; returns (t1 perf_counter, rows left, polls).

    Gives up at ``timeout``, or when the count has not moved for ``stall`` seconds (rows left
    picked by a failed completion wait for dead-execution detection, minutes away).
    """
    conn = raw_connect(url)
    polls = 0
    left = expected
    deadline = time.perf_counter() + timeout
    last_change, last_left = time.perf_counter(), None
    try:
        while True:
            left = count_rows(conn, where)
            polls += 1
            now = time.perf_counter()
            if left != last_left:
                last_change, last_left = now, left
            if left == 0 or now > deadline:
                return now, left, polls
            if now - last_change > stall:
                # stalled: the drain ended when the count last moved
                return last_change, left, polls
            time.sleep(every)
    finally:
        conn.close()


# ----------------------------------------------------------------------------- statistics
def median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    vals = sorted(values)
    if not vals:
        return None
    k = max(0, min(len(vals) - 1, int(-(-p * len(vals) // 100)) - 1))
    return vals[k]


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b in (None, 0):
        return None
    return a / b


# ----------------------------------------------------------------------------- results
def write_result(settings: Settings, name: str, payload: dict[str, Any]) -> Path:
    settings.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "mode": settings.mode,
        "command": settings.command,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        **payload,
    }
    path = settings.out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    return path


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)
