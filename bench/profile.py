"""Where the time goes: a sampling profile of one scheduler process draining N due executions.

``py-spy record --nonblocking --format raw`` (installed into the benchmark-only venv
``bench/.venv-peers``, never the project's) is attached to the worker process of one
throughput run on PostgreSQL (1 process, threads 10, batched completions; both strategies).
Only the thread holding the GIL is sampled (``--gil``), so the shares read as "of the
Python CPU time of this process", and samples / (rate × duration) is how busy the GIL was
(near 100 % means the process is bound by its own Python code). Each sample is attributed

* by its innermost frame (self time) to a layer: the engine (``ekbatan``), SQLAlchemy,
  psycopg, the standard library's threading/queue, or other; and
* to every engine function on its stack (inclusive time).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Settings,
    analyze,
    create_scheduler_table,
    load_rows,
    log,
    scratch_database,
    truncate,
    wait_until_empty,
    write_result,
)
from bench.crew import start_crew
from bench.peers import PEERS_VENV
from bench.worker import scheduler_worker

PY_SPY = PEERS_VENV / "bin" / "py-spy"
RATE = 250

LAYERS = (
    ("engine", "distributed_jobs/"),
    ("sqlalchemy", "sqlalchemy/"),
    ("psycopg", "psycopg"),
    ("threading/queue", ("threading.py", "queue.py")),
    ("logging", "logging/"),
)


def layer_of(frame: str) -> str:
    for name, marker in LAYERS:
        markers = marker if isinstance(marker, tuple) else (marker,)
        if any(m in frame for m in markers):
            return name
    return "other"


def parse_raw(text: str) -> dict[str, Any]:
    """Aggregate py-spy's raw (collapsed) output: ``f1;f2;…;fn count`` per line."""
    total = 0
    layers: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        innermost = frames[-1]
        layers[layer_of(innermost)] += n
        leaf[_short(innermost)] += n
        seen = set()
        for f in frames:
            if "distributed_jobs/" in f:
                key = _short(f, with_line=False)
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += n
    share = (lambda c: round(100.0 * c / total, 1)) if total else (lambda c: 0.0)
    return {
        "samples": total,
        "layers_pct": {k: share(v) for k, v in layers.most_common()},
        "top_self_pct": [(k, share(v)) for k, v in leaf.most_common(15)],
        "top_engine_inclusive_pct": [(k, share(v)) for k, v in inclusive.most_common(15)],
    }


def _short(frame: str, with_line: bool = True) -> str:
    # "func (path/to/module.py:123)" -> "module.func:123"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, line = where.rpartition(":")
    module = Path(path).stem if path else where
    return f"{module}.{name}" + (f":{line}" if with_line and line else "")


def profile_once(url: str, n: int, strategy: str, out_dir: Path, attach_s: float = 1.0) -> dict[str, Any]:
    truncate(url)
    load_rows(url, n, prefix="t")
    analyze(url)
    cfg = {"strategy": strategy, "threads": 10, "strict": False, "name": "bench-profile"}
    crew = start_crew(scheduler_worker, [(url, cfg)])
    pid = crew.processes[0].pid
    raw = out_dir / f"profile-{strategy}.txt"
    cmd = [
        str(PY_SPY),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        str(RATE),
        "--nonblocking",
        "--gil",
    ]
    cmd += ["--output", str(raw)]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(attach_s)  # let py-spy attach
    t0 = crew.release()
    t1, left, _ = wait_until_empty(url, n, max(60.0, n / 100))
    os.kill(spy.pid, signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    crew.finish()
    text = raw.read_text() if raw.exists() else ""
    parsed = parse_raw(text)
    # with --gil only the thread holding the GIL is sampled: samples / (rate x time) is the
    # share of the drain during which Python code of this process was running at all
    parsed["gil_busy_pct"] = round(100.0 * parsed["samples"] / (RATE * (t1 - t0)), 1) if t1 > t0 else None
    return {
        "strategy": strategy,
        "executions": n - left,
        "exec_per_s_while_profiled": round((n - left) / (t1 - t0), 1),
        "command": " ".join(cmd),
        "py_spy_stderr": (err or "").strip()[-300:],
        **parsed,
    }


def run(settings: Settings) -> dict[str, Any]:
    n = settings.size(20_000, 5_000, 200)
    results: dict[str, Any] = {"executions": n, "tool": "py-spy"}
    if not settings.wants("postgres"):
        results["status"] = "skipped: profiled on PostgreSQL only"
    elif not PY_SPY.exists():
        results["status"] = "unavailable: py-spy is installed with the peers venv (bench/.venv-peers)"
    else:
        settings.out.mkdir(parents=True, exist_ok=True)
        results["runs"] = []
        with scratch_database("postgres") as db:
            create_scheduler_table(db.url)
            for strategy in ("fetch", "lock_and_fetch") if not settings.smoke else ("lock_and_fetch",):
                out = profile_once(db.url, n, strategy, settings.out, 0.5 if settings.smoke else 1.0)
                results["runs"].append(out)
                log(f"profile {strategy}: {out['samples']} samples, layers {out['layers_pct']}")
        results["status"] = "ok"
    write_result(settings, "profile", results)
    return results
