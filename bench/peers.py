"""The Python peers in the same run: pgqueuer and procrastinate on the same PostgreSQL, the
same N trivial jobs, 1 and 4 worker processes (and pgqueuer's idle latency, the baseline of
the latency benchmark).

The peers live in a benchmark-only virtual environment, ``bench/.venv-peers``, created on
first use from PyPI (``pip install pgqueuer procrastinate asyncpg psycopg[binary] py-spy``);
they are never a dependency of the project. ``bench/peer_runner.py`` is the harness that
runs inside it; this module builds its commands, runs them and collects their JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import BENCH_DIR, Settings, log, median, percentile, write_result

PEERS_VENV = BENCH_DIR / ".venv-peers"
RUNNER = BENCH_DIR / "peer_runner.py"
PEER_PACKAGES = ("pgqueuer", "procrastinate", "asyncpg", "psycopg[binary]", "py-spy")
PG_BASE = "host=127.0.0.1 port=5432 user=postgres"


def peers_python(settings: Settings | None = None) -> Path:
    if settings is not None and settings.peers_python is not None:
        return settings.peers_python
    return PEERS_VENV / "bin" / "python"


def venv_ready(settings: Settings | None = None) -> bool:
    py = peers_python(settings)
    if not py.exists():
        return False
    probe = subprocess.run(
        [str(py), "-c", "import pgqueuer, procrastinate, asyncpg, psycopg"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


def ensure_venv(settings: Settings) -> bool:
    """Create ``bench/.venv-peers`` from PyPI unless it exists (never during the tests)."""
    if venv_ready(settings):
        return True
    if not settings.allow_peer_install:
        return False
    log(f"creating {PEERS_VENV} and installing {' '.join(PEER_PACKAGES)} from PyPI")
    if not (PEERS_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    subprocess.run(
        [str(PEERS_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", *PEER_PACKAGES],
        check=True,
    )
    return venv_ready(settings)


def throughput_command(
    settings: Settings, peer: str, procs: int, jobs: int, from_spawn: bool = False
) -> list[str]:
    cmd = [
        str(peers_python(settings)),
        str(RUNNER),
        "--peer",
        peer,
        "--mode",
        "throughput",
        "--procs",
        str(procs),
        "--jobs",
        str(jobs),
        "--concurrency",
        "10",
        "--timeout",
        str(max(60, jobs // 50)),
        "--pg",
        PG_BASE,
    ]
    return [*cmd, "--from-spawn"] if from_spawn else cmd


def latency_command(
    settings: Settings, peer: str, tasks: int, spacing: float, due_now: bool = False
) -> list[str]:
    cmd = [
        str(peers_python(settings)),
        str(RUNNER),
        "--peer",
        peer,
        "--mode",
        "latency",
        "--tasks",
        str(tasks),
        "--spacing",
        str(spacing),
        "--first-due",
        "2.0",
        "--timeout",
        "30",
        "--pg",
        PG_BASE,
    ]
    return [*cmd, "--due-now"] if due_now else cmd


def run_command(cmd: list[str], timeout: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return json.loads(lines[-1])


def jobs_for(settings: Settings, peer: str) -> int:
    if peer == "procrastinate" and settings.procrastinate_jobs and not settings.smoke:
        return settings.procrastinate_jobs
    return settings.size(20_000, 5_000, 200)


def plan(settings: Settings) -> list[tuple[str, int, list[str]]]:
    """(peer, procs, command) of every throughput run, one repeat."""
    procs_list = (1,) if settings.smoke else (1, 4)
    out = []
    for peer in ("pgqueuer", "procrastinate"):
        for procs in procs_list:
            out.append((peer, procs, throughput_command(settings, peer, procs, jobs_for(settings, peer))))
    return out


def latency(settings: Settings, tasks: int, spacing: float, due_now: bool = False) -> dict[str, Any]:
    """pgqueuer's idle latency (the baseline of the latency benchmark): jobs enqueued 2 s ahead,
    or (``due_now``) due at once, timed from the enqueue call."""
    cmd = latency_command(settings, "pgqueuer", tasks, spacing, due_now)
    if not venv_ready(settings):
        return {"status": "unavailable", "command": cmd}
    out = run_command(cmd, timeout=2 + tasks * spacing + 120)
    samples = out.get("samples", [])
    return {
        "status": "ok" if samples and "error" not in out else "failed",
        "command": cmd,
        "version": out.get("version"),
        "error": out.get("error"),
        "n": len(samples),
        "p50_ms": _ms(percentile(samples, 50)),
        "p95_ms": _ms(percentile(samples, 95)),
        "max_ms": _ms(max(samples) if samples else None),
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def run(settings: Settings) -> dict[str, Any]:
    repeats = 1 if settings.smoke else settings.repeats
    runs = plan(settings)
    results: dict[str, Any] = {"repeats": repeats, "venv": str(PEERS_VENV), "rows": []}
    if not settings.wants("postgres"):
        results["status"] = "skipped: the peers run on PostgreSQL only"
        write_result(settings, "peers", results)
        return results
    if not ensure_venv(settings):
        results["status"] = (
            "unavailable: bench/.venv-peers does not exist (run ./run bench peers once to create it)"
        )
        results["commands"] = [" ".join(cmd) for _, _, cmd in runs]
        write_result(settings, "peers", results)
        return results
    collected: dict[tuple[str, int], list[dict[str, Any]]] = {(p, k): [] for p, k, _ in runs}
    for r in range(repeats):
        for peer, procs, cmd in runs:
            out = run_command(cmd, timeout=max(120, jobs_for(settings, peer) / 20))
            collected[(peer, procs)].append(out)
            log(
                f"peers {peer} x{procs} run {r + 1}/{repeats}: {out.get('exec_per_s')}/s {out.get('error', '')}"
            )
    for peer, procs, cmd in runs:
        outs = collected[(peer, procs)]
        results["rows"].append(
            {
                "peer": peer,
                "procs": procs,
                "version": next((o.get("version") for o in outs if o.get("version")), None),
                "jobs": jobs_for(settings, peer),
                "exec_per_s": median([o.get("exec_per_s") for o in outs if "error" not in o]),
                "enqueue_per_s": median([o.get("enqueue_per_s") for o in outs if "error" not in o]),
                "command": " ".join(cmd),
                "runs": outs,
            }
        )
    results["status"] = "ok"
    write_result(settings, "peers", results)
    return results


def best(peers: dict[str, Any], procs: int) -> tuple[str | None, float | None]:
    rows = [r for r in peers.get("rows", []) if r["procs"] == procs and r.get("exec_per_s")]
    if not rows:
        return None, None
    top = max(rows, key=lambda r: r["exec_per_s"])
    return top["peer"], top["exec_per_s"]
