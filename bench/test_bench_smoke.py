"""Every benchmark in smoke mode (tiny sizes, 1 repeat), so the harness cannot rot.

Asserts only that each benchmark runs and writes well-formed results — never a speed. The
benchmarks run concurrently (each in its own scratch databases) to keep the whole module
within a few tens of seconds. The peers are never installed here: with ``bench/.venv-peers``
present their smoke runs for real, otherwise only the commands are checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench import peers
from bench.__main__ import BENCHMARKS, main, parse
from bench.common import Settings

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

#: benchmarks whose smoke run has a fixture of its own (``-k pipeline`` runs only it)
OWN_FIXTURE = ("pipeline", "inflow")  # inflow's: bench/test_inflow_smoke.py


@pytest.fixture(scope="module")
def smoke(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[tuple[Path, Settings]]:
    import importlib

    out = tmp_path_factory.mktemp("bench-out")
    chosen = [d for d in pytestconfig.getoption("--db").split(",") if d in ("postgres", "mariadb", "sqlite")]
    settings = Settings(
        smoke=True, dbs=tuple(chosen), repeats=1, out=out, command="pytest smoke", allow_peer_install=False
    )
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {
            name: pool.submit(importlib.import_module(f"bench.{name}").run, settings)
            for name in BENCHMARKS
            if name not in OWN_FIXTURE
        }
        errors = {name: f.exception() for name, f in futures.items()}
    failed = {k: v for k, v in errors.items() if v is not None}
    assert not failed, failed
    yield out, settings


def _load(out: Path, name: str) -> dict:
    data = json.loads((out / f"{name}.json").read_text())
    assert data["benchmark"] == name
    assert data["mode"] == "smoke"
    return data


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and x > 0


def test_limits_measure_every_workload(smoke):
    out, settings = smoke
    data = _load(out, "limits")
    for dialect in ("postgres", "mariadb"):
        if dialect in settings.dbs:
            rows = data["dialects"][dialect]
            assert rows and all(_positive(r["exec_per_s"]) and not r["runs"][0]["errors"] for r in rows)


def test_throughput_drains_every_row(smoke):
    out, _settings = smoke
    data = _load(out, "throughput")
    for dialect, rows in data["dialects"].items():
        for row in rows:
            assert row["complete"], row
            assert _positive(row["exec_per_s"])
            if dialect == "postgres":
                assert _positive(row["xacts_per_exec"]) and _positive(row["exec_per_xact"])


def test_backlog_drains_every_size_unanalysed(smoke):
    out, settings = smoke
    data = _load(out, "backlog")
    for dialect in ("postgres", "mariadb"):
        if dialect not in settings.dbs:
            continue
        for n in data["sizes"]:
            [run] = data["figures"][f"{dialect} ours {n}"]["runs"]
            assert run["left"] == 0 and not run["errors"] and _positive(run["exec_per_s"]), run
        # the curve is the rate at each size against the first, in the same round
        assert _positive(data["curves"][f"{dialect} {data['sizes'][-1]} / {data['sizes'][0]}"]["median"])
    if "postgres" in settings.dbs:
        [run] = data["figures"][f"postgres ours {data['sizes'][0]} from spawn"]["runs"]
        assert run["left"] == 0 and _positive(run["exec_per_s"])


def test_peers_commands_or_runs(smoke):
    out, settings = smoke
    data = _load(out, "peers")
    if "postgres" not in settings.dbs:
        return
    planned = peers.plan(settings)
    assert {p for p, _, _ in planned} == {"pgqueuer", "procrastinate"}
    for _, procs, cmd in planned:
        assert cmd[1].endswith("peer_runner.py") and "--procs" in cmd and str(procs) in cmd
    if peers.venv_ready(settings):
        assert data["status"] == "ok"
        assert all(_positive(r["exec_per_s"]) for r in data["rows"]), data["rows"]
    else:
        assert data["status"].startswith("unavailable")
        assert len(data["commands"]) == len(planned)


def test_outbox_peer_delivers_every_event_both_ways_or_says_why(smoke):
    out, settings = smoke
    data = _load(out, "outbox_peer")
    if "postgres" not in settings.dbs:
        assert data["status"].startswith("skipped"), data
        return
    [one] = data["rounds"]
    ours = one["ours_end_to_end"]
    assert ours["deliveries"] == ours["expected"] == 3 * data["events"], ours
    assert _positive(ours["deliveries_per_s"]) and not ours["job_failures"] and not ours["error"], ours
    latency = one["ours_latency"]
    assert latency["n"] == latency["expected"] and latency["p95_ms"] >= latency["p50_ms"] > 0, latency
    if peers.venv_ready(settings):
        peer = one["peer_end_to_end"]
        assert peer["deliveries"] == peer["expected"] == 3 * data["events"], peer
        assert one["peer_latency"]["n"] == one["peer_latency"]["expected"], one["peer_latency"]
        assert _positive(data["summary"]["rate_ratio"]) and _positive(data["summary"]["p95_ratio"])
    else:
        assert data["status"].startswith("peer unavailable"), data["status"]
        assert all("outbox_peer_runner.py" in cmd for cmd in data["peer_commands"])


def test_latency_records_every_task(smoke):
    out, settings = smoke
    data = _load(out, "latency")
    assert set(data["dialects"]) == set(settings.dbs)
    for rows in data["dialects"].values():
        for row in rows:
            assert row["n"] == row["expected"] and row["left"] == 0, row
            assert row["p95_ms"] is not None and row["p95_ms"] >= row["p50_ms"]
    if "postgres" in settings.dbs:
        assert "command" in data["pgqueuer"]


def test_scale_compares_table_sizes(smoke):
    out, _settings = smoke
    data = _load(out, "scale")
    for per in data["dialects"].values():
        assert len(per["sizes"]) == 2
        assert all(_positive(v) for v in per["ratios"].values()), per["ratios"]
        assert per["burst"]["left"] == 0


def test_footprint_counts_idle_statements_and_rss(smoke):
    out, _settings = smoke
    data = _load(out, "footprint")
    for dialect, per in data["dialects"].items():
        assert per["idle"]["statements"] >= 1
        assert _positive(per["idle"]["rss_mb"]) and _positive(per["bare"]["rss_mb"])
        if dialect != "sqlite":
            assert _positive(per["load"]["rss_peak_mb"])


def test_bulk_measures_engine_and_driver(smoke):
    out, _settings = smoke
    data = _load(out, "bulk")
    for row in data["dialects"].values():
        assert _positive(row["schedule_batch"]["per_s"]) and _positive(row["raw_multirow"]["per_s"])


def test_profile_runs_or_says_why_not(smoke):
    out, _settings = smoke
    data = _load(out, "profile")
    if data["status"] == "ok":
        run = data["runs"][0]
        assert run["samples"] >= 0 and isinstance(run["layers_pct"], dict)
    else:
        assert data["status"].startswith(("unavailable", "skipped"))


def test_report_writes_results_markdown(smoke):
    out, _settings = smoke
    target = out / "RESULTS.md"
    assert main(["--report-only", "--out", str(out), "--results", str(target)]) == 0
    text = target.read_text()
    assert "## Goals" in text and "## 2. Throughput" in text


@pytest.fixture(scope="module")
def pipeline_smoke(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> tuple[Path, Settings]:
    from bench import pipeline

    out = tmp_path_factory.mktemp("bench-pipeline-out")
    chosen = [d for d in pytestconfig.getoption("--db").split(",") if d in ("postgres", "mariadb", "sqlite")]
    settings = Settings(smoke=True, dbs=tuple(chosen), repeats=1, out=out, command="pytest smoke")
    pipeline.run(settings)
    return out, settings


def test_pipeline_drains_every_event_and_times_every_delivery(pipeline_smoke):
    out, settings = pipeline_smoke
    data = _load(out, "pipeline")
    assert set(data["dialects"]) == set(settings.dbs)
    for dialect, per in data["dialects"].items():
        if dialect != "sqlite":
            drain = per["drain"]
            assert drain["complete"] and drain["deliveries"] == 3 * drain["events"], drain
            assert _positive(drain["writer_events_per_s"]) and _positive(drain["deliveries_per_s"])
            assert _positive(drain["ratio"])
            conc = per["concurrent"]
            assert conc["complete"] and conc["samples"] and _positive(conc["arrival_deliveries_per_s"]), conc
        expected = {(dialect, True), (dialect, False)} if dialect == "postgres" else {(dialect, True)}
        assert {(r["dialect"], r["wakeups"]) for r in per["latency"]} == expected
        for row in per["latency"]:
            assert row["n"] == row["expected"] and row["left"] == 0, row
            assert row["p95_ms"] is not None and row["p95_ms"] >= row["p50_ms"] > 0
    target = out / "RESULTS.md"
    assert main(["--report-only", "--out", str(out), "--results", str(target)]) == 0
    assert "## 9. Local event handler pipeline" in target.read_text()


def test_command_line_parsing():
    chosen, settings, _ = parse(["throughput", "--db", "postgres", "--quick"])
    assert chosen == ["throughput"] and settings.dbs == ("postgres",) and settings.quick
    with pytest.raises(SystemExit):
        parse(["no-such-benchmark"])


def test_interleaved_rounds_report_their_median_round():
    from bench.latency import median_round
    from bench.report import _rounds

    runs = [
        {
            "strategy": "fetch",
            "source": "now",
            "n": 50,
            "expected": 50,
            "left": 0,
            "p50_ms": p50,
            "p95_ms": p95,
            "max_ms": mx,
        }
        for p50, p95, mx in ((5.0, 9.0, 20.0), (4.0, 7.0, 12.0), (6.0, 8.0, 30.0))
    ]
    row = median_round(runs)
    assert (row["p50_ms"], row["p95_ms"], row["max_ms"]) == (5.0, 8.0, 30.0)
    assert (row["n"], row["expected"], row["left"]) == (150, 150, 0)
    assert [r["p95_ms"] for r in row["rounds"]] == [9.0, 7.0, 8.0]
    assert _rounds(row) == ", median of rounds 9.0 / 7.0 / 8.0"
    peer = median_round(
        [{"status": "ok", "p95_ms": 9.0}, {"status": "failed", "error": "exit 1", "p95_ms": None}]
    )
    assert peer["status"] == "failed" and peer["error"] == "exit 1" and peer["p95_ms"] == 9.0
    assert median_round(runs[:1]) is runs[0] and _rounds(runs[0]) == ""


def test_pause_poll_smoke_times_every_condition_and_checks_each_pause_took(pytestconfig, capsys):
    import re

    from bench import pause_poll

    # lock-and-fetch, the claim it times, is the servers' strategy: SQLite fetches
    servers = [d for d in pytestconfig.getoption("--db").split(",") if d in ("postgres", "mariadb")]
    if not servers:
        pytest.skip("pause_poll needs PostgreSQL or MariaDB")
    # the live engine: a snapshot put first on sys.path would outlive the run in this process
    assert main(["pause_poll", "--smoke", "--live-engine", "--db", ",".join(servers)]) == 0
    lines = capsys.readouterr().out.splitlines()
    sizes = pause_poll.SMOKE
    figure = re.compile(r"\d+\.\d\d(?: ms|×)")
    for dialect in servers:
        # the table: a header, then one row per condition with a figure under every statement
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{dialect}: {sizes.rows:,} rows ("))
        statements = len(re.split(r"\s{2,}", lines[at + 1].strip()))
        assert statements == 4, lines[at + 1]  # two claims, the fetch read, the pauses read
        rows = lines[at + 2 : at + 2 + len(pause_poll.CONDITIONS)]
        for condition, row in zip(pause_poll.CONDITIONS, rows, strict=True):
            assert row.startswith("  " + pause_poll.condition_label(condition, sizes)), row
            cells = figure.findall(row)
            assert len(cells) == statements, row
            # the baseline in milliseconds, the paused conditions as ratios to it
            assert all(c.endswith("ms" if condition == pause_poll.BASELINE else "×") for c in cells), row
            assert all(float(c.rstrip(" ms×")) > 0 for c in cells), row
        # measure() raises unless every pause took: its summary says what it checked
        checked = lines[at + 2 + len(rows) + 1]
        assert checked.startswith(f"  checked: {sizes.paused} executions held"), checked
        assert "(the baseline's claims took 0)" not in checked, checked


def test_telemetry_ab_drains_in_every_configuration(pytestconfig):
    from bench import telemetry_ab

    servers = [d for d in pytestconfig.getoption("--db").split(",") if d in ("postgres", "mariadb")]
    for dialect in servers[:1]:  # one server is enough to keep the harness honest
        ratios = telemetry_ab.compare(dialect, executions=200, rounds=1, procs_each=(1,))
        assert set(ratios) == {(1, c) for c in telemetry_ab.MEASURED}
        assert all(len(v) == 1 and _positive(v[0]) for v in ratios.values())
