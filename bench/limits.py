"""The database's own ceiling for the minimal work per execution: plain driver loops
(psycopg 3 on PostgreSQL, PyMySQL on MariaDB), no engine, no SQLAlchemy.

All on db-scheduler's ``scheduled_tasks`` table (the engine's verbatim DDL: 12 columns, primary
key (task_name, task_instance), three indexes), reloaded with due rows before every run.
K processes (spawned, connected, then released together) loop for a fixed time; the figure is
rows completed per second over all of them. Workloads:

* ``delete_pk`` — single-row autocommit ``DELETE … WHERE task_name = ? AND task_instance = ?``:
  one commit per execution, the floor of any one-commit-per-execution design;
* ``pick_each_delete`` — db-scheduler's one-time pattern: claim 100 due rows in one statement
  (PostgreSQL: ``UPDATE … WHERE (…) IN (SELECT … LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING``;
  MariaDB: ``SELECT … FOR UPDATE SKIP LOCKED`` + ``UPDATE … IN (…)`` in one transaction), then
  one autocommit ``DELETE`` per execution (by key and version): 101 commits per 100;
* ``pick_batch_delete`` — the same claim, then one batched autocommit
  ``DELETE … WHERE (task_name, task_instance) IN (…)``: 2 commits per 100 (the ceiling of a
  design that commits its claim before running and batches its completions);
* ``lock_batch_delete`` — ``SELECT … FOR UPDATE SKIP LOCKED LIMIT 100`` and one batched
  ``DELETE … IN (…)`` inside one transaction: 1 commit per 100 (no durable claim at all; an
  upper bound no scheduler can reach without giving up crash recovery).
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    Settings,
    analyze,
    create_scheduler_table,
    dialect_of,
    load_rows,
    log,
    median,
    raw_connect,
    scratch_database,
    truncate,
    write_result,
)
from bench.crew import start_crew

WORKLOADS = ("delete_pk", "pick_each_delete", "pick_batch_delete", "lock_batch_delete")
LABELS = {
    "delete_pk": "single-row autocommit DELETE by PK",
    "pick_each_delete": "db-scheduler one-time pattern: pick 100, then 1 autocommit DELETE each",
    "pick_batch_delete": "pick 100 (committed), then 1 batched DELETE (2 commits / 100)",
    "lock_batch_delete": "SELECT … FOR UPDATE SKIP LOCKED 100 + batched DELETE, 1 transaction",
}
BATCH = 100


def _keys_sql(n: int) -> str:
    return ", ".join(["(%s, %s)"] * n)


def _flat(keys: list[tuple[Any, ...]]) -> list[Any]:
    out: list[Any] = []
    for k in keys:
        out.extend(k[:2])
    return out


class Loop:
    """One connection's statements for one workload."""

    def __init__(self, url: str, index: int, procs: int) -> None:
        self.kind = dialect_of(url)
        self.conn = raw_connect(url, autocommit=True)
        self.index = index
        self.procs = procs
        self.next_key = index + 1
        pg = self.kind == "postgres"
        self.now = "now()" if pg else "UTC_TIMESTAMP(6)"
        self.false = "false" if pg else "0"
        self.true = "true" if pg else "1"

    def cursor(self) -> Any:
        return self.conn.cursor()

    def delete_pk(self, cur: Any) -> int:
        cur.execute(
            "DELETE FROM scheduled_tasks WHERE task_name = %s AND task_instance = %s",
            ("bench", f"r{self.next_key}"),
        )
        self.next_key += self.procs
        return cur.rowcount

    def _pick(self, cur: Any) -> list[tuple[Any, ...]]:
        sub = (
            f"SELECT task_name, task_instance FROM scheduled_tasks WHERE picked = {self.false} "
            f"AND execution_time <= {self.now} ORDER BY execution_time"
        )
        if self.kind == "postgres":
            cur.execute(
                f"UPDATE scheduled_tasks SET picked = true, picked_by = %s, last_heartbeat = now(), "
                f"version = version + 1 WHERE (task_name, task_instance) IN ({sub} LIMIT {BATCH} FOR UPDATE SKIP LOCKED) "
                "RETURNING task_name, task_instance, version",
                (f"limits-{self.index}",),
            )
            return cur.fetchall()
        self.conn.begin()
        cur.execute(f"{sub} LIMIT {BATCH} FOR UPDATE SKIP LOCKED")
        keys = cur.fetchall()
        if keys:
            cur.execute(
                f"UPDATE scheduled_tasks SET picked = 1, picked_by = %s, last_heartbeat = UTC_TIMESTAMP(6), "
                f"version = version + 1 WHERE (task_name, task_instance) IN ({_keys_sql(len(keys))})",
                [f"limits-{self.index}", *_flat(keys)],
            )
        self.conn.commit()
        return [(k[0], k[1], 2) for k in keys]

    def pick_each_delete(self, cur: Any) -> int:
        done = 0
        for name, instance, version in self._pick(cur):
            cur.execute(
                "DELETE FROM scheduled_tasks WHERE task_name = %s AND task_instance = %s AND version = %s",
                (name, instance, version),
            )
            done += cur.rowcount
        return done

    def pick_batch_delete(self, cur: Any) -> int:
        keys = self._pick(cur)
        if not keys:
            return 0
        cur.execute(
            f"DELETE FROM scheduled_tasks WHERE (task_name, task_instance) IN ({_keys_sql(len(keys))})",
            _flat(keys),
        )
        return cur.rowcount

    def lock_batch_delete(self, cur: Any) -> int:
        if self.kind == "postgres":
            with self.conn.transaction():
                cur.execute(
                    f"SELECT task_name, task_instance FROM scheduled_tasks WHERE picked = false "
                    f"AND execution_time <= now() ORDER BY execution_time LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
                )
                keys = cur.fetchall()
                if not keys:
                    return 0
                cur.execute(
                    f"DELETE FROM scheduled_tasks WHERE (task_name, task_instance) IN ({_keys_sql(len(keys))})",
                    _flat(keys),
                )
                return cur.rowcount
        self.conn.begin()
        cur.execute(
            "SELECT task_name, task_instance FROM scheduled_tasks WHERE picked = 0 "
            f"AND execution_time <= UTC_TIMESTAMP(6) ORDER BY execution_time LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
        )
        keys = cur.fetchall()
        n = 0
        if keys:
            cur.execute(
                f"DELETE FROM scheduled_tasks WHERE (task_name, task_instance) IN ({_keys_sql(len(keys))})",
                _flat(keys),
            )
            n = cur.rowcount
        self.conn.commit()
        return n


def limit_worker(
    pipe: Any, go: Any, stop: Any, url: str, workload: str, index: int, procs: int, seconds: float
) -> None:
    loop = Loop(url, index, procs)
    step = getattr(loop, workload)
    cur = loop.cursor()
    pipe.send({"event": "ready"})
    go.wait()
    t0 = time.perf_counter()
    done = 0
    statements = 0
    emptied = False
    retries = 0
    while True:
        try:
            n = step(cur)
        except Exception as exc:  # MariaDB: a deadlock between two claims; retry the step
            if getattr(exc, "args", (None,))[0] not in (1213, 1205):
                raise
            loop.conn.rollback()
            retries += 1
            continue
        statements += 1
        done += n
        if n == 0:
            emptied = True
            break
        if time.perf_counter() - t0 >= seconds:
            break
    elapsed = time.perf_counter() - t0
    loop.conn.close()
    stop.wait(30)
    pipe.send({"done": done, "elapsed": elapsed, "emptied": emptied, "steps": statements, "retries": retries})


def run_once(url: str, workload: str, procs: int, seconds: float, rows: int) -> dict[str, Any]:
    truncate(url)
    load_rows(url, rows, prefix="r")
    analyze(url)
    crew = start_crew(limit_worker, [(url, workload, i, procs, seconds) for i in range(procs)])
    crew.release()
    reports = crew.finish(timeout=seconds + 60)
    errors = [r["error"] for r in reports if "error" in r]
    done = sum(r.get("done", 0) for r in reports)
    elapsed = max((r.get("elapsed", 0.0) for r in reports), default=0.0)
    return {
        "rows_done": done,
        "seconds": round(elapsed, 3),
        "exec_per_s": round(done / elapsed, 1) if elapsed > 0 else None,
        "emptied": any(r.get("emptied") for r in reports),
        "deadlock_retries": sum(r.get("retries", 0) for r in reports),
        "errors": errors,
    }


def rows_for(workload: str, settings: Settings) -> int:
    if settings.smoke:
        return 3_000
    per_row = workload in ("delete_pk", "pick_each_delete")
    return 60_000 if per_row else 300_000


def run(settings: Settings) -> dict[str, Any]:
    seconds = 0.5 if settings.smoke else 3.0 if settings.quick else 5.0
    repeats = 1 if settings.smoke else settings.repeats
    conns = (1,) if settings.smoke else (1, 4)
    workloads = ("delete_pk", "pick_batch_delete") if settings.smoke else WORKLOADS
    results: dict[str, Any] = {"seconds": seconds, "repeats": repeats, "dialects": {}}
    for dialect in ("postgres", "mariadb"):
        if not settings.wants(dialect):
            continue
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {(w, c): [] for w in workloads for c in conns}
        with scratch_database(dialect) as db:
            create_scheduler_table(db.url)
            for r in range(repeats):
                for w in workloads:
                    for c in conns:
                        out = run_once(db.url, w, c, seconds, rows_for(w, settings))
                        runs[(w, c)].append(out)
                        log(f"limits {dialect} {w} x{c} run {r + 1}/{repeats}: {out['exec_per_s']}/s")
        results["dialects"][dialect] = [
            {
                "workload": w,
                "label": LABELS[w],
                "connections": c,
                "exec_per_s": median([x["exec_per_s"] for x in rs]),
                "runs": rs,
            }
            for (w, c), rs in runs.items()
        ]
    write_result(settings, "limits", results)
    return results


def ceiling(limits: dict[str, Any], dialect: str, workload: str, connections: int) -> float | None:
    for row in limits.get("dialects", {}).get(dialect, []):
        if row["workload"] == workload and row["connections"] == connections:
            return row["exec_per_s"]
    return None
