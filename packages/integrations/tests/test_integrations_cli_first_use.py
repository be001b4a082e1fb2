"""What a new user met trying the command line from a fresh clone, through the real ``ekbatan``
entry point in a subprocess: a class given to ``--options``, click's usage errors in one line,
doctor's details wrapped rather than cut, the refusal of a picked event pipeline job, recurring
rows without data, a missing jobs-config, and an empty eventlog.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from integrations_support import application_yml
from test_integrations_cli_usability import ekbatan, package, query, sqlite_app

JOBS = '''
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ekbatan.core import Action, action
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job
from ekbatan.integrations.options import EkbatanOptions


@dataclass
class Receipt:
    """Not an EkbatanOptions: what a user may name by mistake."""

    order: str
    amount: int


def not_options() -> dict[str, str]:
    return {"packages": "shop"}


def exploding() -> EkbatanOptions:
    raise RuntimeError("no settings for you")


@action
class PlaceOrder(Action[dict, None]):
    def perform(self, principal: Any, params: dict) -> None:
        return None


@distributed_job
class NightlyReport(DistributedJob):
    def name(self) -> str:
        return "nightly-report"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        return None
'''


def shop(directory) -> None:
    package(directory, "shop", JOBS)


def one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    return stderr


def detail_text(table: str) -> str:
    """Every detail of doctor's table, its wrapped lines joined, without whitespace."""
    header, *lines = table.splitlines()
    start = header.index("DETAIL")
    return "".join(line[start:] for line in lines if not line.startswith("note:")).replace(" ", "")


def detail_words(table: str) -> str:
    """Every detail of doctor's table, its wrapped lines joined with spaces."""
    header, *lines = table.splitlines()
    start = header.index("DETAIL")
    return " ".join(line[start:].strip() for line in lines if not line.startswith("note:"))


# ---------------------------------------------------------------- --options


def test_a_class_that_is_not_ekbatan_options_is_a_usage_error_naming_it(tmp_path):
    shop(tmp_path)
    result = ekbatan(tmp_path, "worker", "--options", "shop.module:Receipt", code=2)
    assert one_line(result.stderr).startswith(
        "error: --options shop.module:Receipt is the class shop.module.Receipt, not an EkbatanOptions; "
        "write MODULE:NAME naming an EkbatanOptions, or a function of no argument returning one"
    ), result.stderr
    assert "__init__" not in result.stderr


@pytest.mark.slow  # three ekbatan processes
def test_a_function_returning_something_else_is_a_usage_error_and_one_that_raises_fails(tmp_path):
    shop(tmp_path)
    other = ekbatan(tmp_path, "worker", "--options", "shop.module:not_options", code=2)
    assert (
        "--options shop.module:not_options returned {'packages': 'shop'}, not an EkbatanOptions; write "
        in (one_line(other.stderr))
    )
    raising = ekbatan(tmp_path, "worker", "--options", "shop.module:exploding", code=1)
    assert "calling it failed: no settings for you" in one_line(raising.stderr)
    options = ekbatan(tmp_path, "worker", "--options", "ekbatan.integrations.options:EkbatanOptions", code=2)
    assert "name at least one package" in one_line(options.stderr)  # the class itself is fine


# ---------------------------------------------------------------- usage errors in one line


@pytest.mark.slow  # four ekbatan processes
def test_a_usage_error_is_one_line_naming_the_help_to_read(tmp_path):
    bogus = ekbatan(tmp_path, "worker", "--bogus", code=2)
    assert bogus.stderr == "error: No such option '--bogus' (see 'ekbatan worker --help')\n", bogus.stderr
    config, url = sqlite_app(tmp_path)
    both = ekbatan(tmp_path, "tasks", "list", "--config", str(config), "--url", url, code=2)
    assert both.stderr == "error: give either --config or --url, not both (see 'ekbatan tasks list --help')\n"
    missing = ekbatan(tmp_path, "tasks", "show", "send-invoice", code=2)
    assert one_line(missing.stderr).endswith("(see 'ekbatan tasks show --help')\n"), missing.stderr
    assert "Usage:" not in missing.stderr
    as_json = ekbatan(tmp_path, "worker", "--bogus", "--json", code=2)
    assert as_json.stderr == '{"error": "No such option \'--bogus\'.", "exit": 2}\n', as_json.stderr


# ---------------------------------------------------------------- a missing jobs-config


@pytest.mark.slow  # three ekbatan processes
def test_a_missing_jobs_config_is_named_whole_and_without_python_api_advice(tmp_path):
    shop(tmp_path)
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/an_application_database_with_a_long_name"
    config = application_yml(tmp_path, url, jobs_pool=False).name  # as a user names it: application.yml
    key = "ekbatan.sharding.groups[0].members[0].configs.jobs-config"

    worker = ekbatan(tmp_path, "worker", "--config", str(config), "--packages", "shop", code=1)
    assert one_line(worker.stderr).startswith(f"error: no jobs pool: {key} is not set"), worker.stderr
    assert "ConnectionProvider" not in worker.stderr and worker.stderr.endswith("maximum-pool-size: 2)\n")

    doctor = ekbatan(tmp_path, "doctor", "--config", str(config), "--packages", "shop", code=1)
    lines = doctor.stdout.splitlines()
    assert max(map(len, lines)) <= 100 and "…" not in doctor.stdout, doctor.stdout
    details = detail_text(doctor.stdout)
    assert f"nojobspool:{key}isnotset" in details, doctor.stdout  # the key, never cut
    assert "ConnectionProvider" not in details
    assert "postgresql+psycopg://postgres@127.0.0.1:5432/an_application_database_with_a_long_name" in details

    # without --packages doctor cannot know that there are jobs: a warning saying what the worker does
    bare = ekbatan(tmp_path, "doctor", "--config", str(config), code=1)  # the database is not there
    assert (
        "the default shard has no jobs-config: ekbatan worker (and build_runtime) will refuse to start when "
        "the application has jobs, tasks or handlers" in detail_words(bare.stdout)
    ), bare.stdout


# ---------------------------------------------------------------- tasks


@pytest.mark.slow  # three ekbatan processes
def test_recurring_rows_without_data_have_no_data_line_and_a_picked_pipeline_job_says_when_revived(tmp_path):
    config, url = sqlite_app(tmp_path)  # heartbeat interval 1 s × 6 missed heartbeats
    ekbatan(tmp_path, "migrate", "--config", str(config))
    for task, data in (("nightly-report", b"null"), ("send-invoice", b'{"order": 7}')):
        query(
            url,
            "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version, "
            "task_data) VALUES (:task, 'recurring', :at, 0, 1, :data)",
            task=task,
            at=datetime(2030, 1, 1),
            data=data,
        )
    listing = ekbatan(tmp_path, "tasks", "list", "--config", str(config)).stdout
    assert "data null" not in listing, listing
    assert '  data {"order":7}' in listing.splitlines(), listing
    wide = ekbatan(tmp_path, "tasks", "list", "--config", str(config), "--wide").stdout
    assert "null" not in wide, wide

    # as a SIGKILLed worker leaves it: picked, its heartbeat young (stamped just now: the processes
    # above can take seconds on a busy machine)
    stamped = time.monotonic()
    query(
        url,
        "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, picked_by, "
        "last_heartbeat, version) VALUES ('ekbatan-event-fanout', 'recurring', :at, 1, 'node-a', :at, 2)",
        at=datetime.now(UTC).replace(tzinfo=None),
    )
    refused = ekbatan(
        tmp_path, "tasks", "cancel", "ekbatan-event-fanout", "recurring", "--config", str(config), code=1
    )
    text = one_line(refused.stderr)
    assert "is picked by node-a, whose last heartbeat is " in text, text
    if time.monotonic() - stamped >= 5:  # the command itself took most of the dead window to start
        assert "older than the dead window of 6s" in text and "looks gone" in text, text
        return
    assert "nothing to wait for" in text, text
    found = re.search(
        r"within the dead window of 6s \(heartbeat interval 1s × 6 missed heartbeats\): if its worker is "
        r"gone, another worker revives it in about ([0-6])s, once the heartbeat is older than the dead window",
        text,
    )
    assert found, text


# ---------------------------------------------------------------- doctor and an empty eventlog


def test_doctor_with_packages_on_an_empty_eventlog_says_no_events_yet(tmp_path):
    shop(tmp_path)
    config = sqlite_app(tmp_path)[0].name
    ekbatan(tmp_path, "migrate", "--config", config)
    report = ekbatan(tmp_path, "doctor", "--config", config, "--packages", "shop").stdout
    [line] = [line for line in report.splitlines() if " eventlog actions " in line]
    assert line.startswith("pass") and "no events recorded yet in eventlog" in detail_words(report), report
    assert "every event in" not in report
