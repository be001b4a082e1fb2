"""The README's first command: the demo runs two scheduler processes and each task once."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs_every_one_time_task_exactly_once(tmp_path):
    finished = subprocess.run(
        [sys.executable, "-m", "ekbatan.distributed_jobs.demo", "--seconds", "4", "--tasks", "6"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the system temp dir, for this run only
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "one-time executions: 6 of 6 (each exactly once: True)" in finished.stdout
    assert "rows left in scheduled_tasks: ['report/recurring']" in finished.stdout
    assert not list(tmp_path.iterdir()), "the demo left its temporary directory behind"
