"""The steady-inflow benchmark in smoke mode (a few seconds per step), so its harness cannot rot.

Asserts only that every step runs, feeds and watches as planned and writes well-formed
results — never a speed. The peers are never installed here: with ``bench/.venv-peers``
present pgqueuer's steps run for real, otherwise only the command is checked.
"""

from __future__ import annotations

import json

import pytest

from bench import inflow, peers
from bench.common import Settings

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> tuple[dict, Settings]:
    if "postgres" not in pytestconfig.getoption("--db").split(","):
        pytest.skip("the inflow benchmark runs on PostgreSQL only")
    out = tmp_path_factory.mktemp("bench-inflow-out")
    settings = Settings(
        smoke=True, dbs=("postgres",), repeats=1, out=out, command="pytest smoke", allow_peer_install=False
    )
    inflow.run(settings)
    data = json.loads((out / "inflow.json").read_text())
    assert data["benchmark"] == "inflow" and data["mode"] == "smoke"
    return data, settings


def _watched_and_fed(step: dict) -> None:
    assert step["samples"] and step["achieved_per_s"] > 0 and not step["errors"], step
    assert step["lag_n"] > 0 and step["lag_p95_ms"] >= step["lag_p50_ms"], step
    assert step["backlog_slope_per_s"] is not None


def test_ours_search_and_half_rate(smoke):
    data, _settings = smoke
    [round_] = data["per_round"]
    for step in round_["ours"]["steps"]:
        _watched_and_fed(step)
    _watched_and_fed(round_["ours"]["half_rate"])
    # a verdict, not asserted: a 2 s window on a busy host may judge even the start rate unbounded
    assert data["ours"]["highest_sustainable_per_s"] in (None, data["start_rate"])


def test_future_rows_rerun_ours(smoke):
    data, _settings = smoke
    future = data["future"]
    assert future["rows"] > 0 and future["steps"]
    for step in future["steps"]:
        _watched_and_fed(step)
    _watched_and_fed(future["half_rate"])


def test_pgqueuer_steps_or_command(smoke):
    data, settings = smoke
    if peers.venv_ready(settings):
        [round_] = data["per_round"]
        for step in round_["pgqueuer"]["steps"]:
            _watched_and_fed(step)
        _watched_and_fed(round_["pgqueuer"]["half_rate"])
        assert "ours_over_pgqueuer" in data
    else:
        command = data["pgqueuer_command"]
        assert "inflow_peer_runner.py" in command and "--rate" in command


def test_search_doubles_then_bisects():
    search = inflow.RateSearch(start=1000, bisections=2, max_steps=10)
    outcomes = {1000: True, 2000: True, 4000: False, 3000: True, 3500: False}
    while (rate := search.next_rate()) is not None:
        search.record({"rate": rate, "sustainable": outcomes[rate]})
    assert [s["rate"] for s in search.steps] == [1000, 2000, 4000, 3000, 3500]
    assert (search.passed, search.failed) == (3000, 3500)
