"""``ekbatan doctor`` and ``ekbatan events status`` with ``--packages``: what the application
defines compared with what its databases hold, through the real ``ekbatan`` command in a
subprocess — a misspelled scheduled task name, a handler of an event type nobody records, and
events of another application's actions in a shared eventlog."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from integrations_support import application_yml

from ekbatan.core import ModelEvent, record_events
from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance

# each test runs the command a few times, a few seconds each (a fresh interpreter every time)
pytestmark = pytest.mark.slow

APP = """
from datetime import timedelta
from typing import Any

from ekbatan.core import Action, ModelEvent, action
from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


class ReceiptSent(ModelEvent):
    order: str


class RefundIssued(ModelEvent):
    order: str


@action
class SendReceipt(Action[dict, None]):
    def perform(self, principal: Any, params: dict) -> None:
        return None


@distributed_job
class SendReceiptJob(DistributedJob):
    def name(self) -> str:
        return "send-receipt"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        return None


@event_handler
class ReceiptMailer(EventHandler[ReceiptSent]):
    def name(self) -> str:
        return "receipt-mailer"

    def event_type(self) -> type[ReceiptSent]:
        return ReceiptSent

    def handle(self, envelope: EventEnvelope[ReceiptSent]) -> None:
        return None


@event_handler
class RefundMailer(EventHandler[RefundIssued]):
    def name(self) -> str:
        return "refund-mailer"

    def event_type(self) -> type[RefundIssued]:
        return RefundIssued

    def handle(self, envelope: EventEnvelope[RefundIssued]) -> None:
        return None
"""


class ReceiptSent(ModelEvent):
    """Stored under the simple name the application's own class has."""

    order: str


def ekbatan(cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "ekbatan.integrations.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result


def as_json(cwd: Path, *args: str, code: int = 0) -> Any:
    return json.loads(ekbatan(cwd, *args, "--json", code=code).stdout)


def checks_named(report: Any, check: str) -> list[dict[str, str]]:
    return [c for c in report["checks"] if c["check"] == check]


@pytest.fixture
def app(app_db, tmp_path) -> str:
    """The application's package in ``tmp_path`` and its migrated databases; the config's path."""
    package = tmp_path / "shopapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "parts.py").write_text(textwrap.dedent(APP))
    config = str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))
    ekbatan(tmp_path, "migrate", "--config", config)
    return config


def record(app_db, action_name: str, count: int) -> None:
    engine = sa.create_engine(app_db.url)
    try:
        with engine.begin() as connection:
            record_events(
                connection,
                [ReceiptSent(order=str(i)) for i in range(count)],
                action_name=action_name,
                params={},
                namespace="wallet",
                eventlog_schema=app_db.eventlog,
            )
    finally:
        engine.dispose()


def schedule_misspelled(app_db) -> None:
    engine = sa.create_engine(app_db.url)
    try:
        client = SchedulerClient(engine)
        due = datetime.now(UTC) - timedelta(minutes=1)
        for order in ("order-1", "order-2"):
            assert client.schedule(TaskInstance("sendd-receipt", order), due)
        # a row of a known task, and one of an unknown name not due yet: neither is reported
        assert client.schedule(TaskInstance("send-receipt", "x"), due)
        assert client.schedule(TaskInstance("later-task", "x"), due + timedelta(days=1))
    finally:
        engine.dispose()


@pytest.mark.dialects("postgres", "mariadb")
def test_doctor_warns_about_what_the_application_does_not_define(app, app_db, tmp_path):
    schedule_misspelled(app_db)
    record(app_db, "SendReceipt", 1)
    record(app_db, "OtherAppAction", 3)

    report = as_json(tmp_path, "doctor", "--config", app, "--packages", "shopapp")

    assert report["ok"] and report["notes"] == []
    [tasks] = checks_named(report, "task names")
    assert tasks["status"] == "warn"
    assert "'sendd-receipt' (2 row(s), did you mean 'send-receipt'?)" in tasks["detail"]
    assert "later-task" not in tasks["detail"]
    assert "'send-receipt' (" not in tasks["detail"]
    [handlers] = checks_named(report, "handlers")
    assert handlers["status"] == "warn"
    assert "'refund-mailer' (event type 'RefundIssued')" in handlers["detail"]
    assert "receipt-mailer" not in handlers["detail"]
    [actions] = checks_named(report, "eventlog actions")
    assert actions["status"] == "warn"
    assert "3 event(s)" in actions["detail"] and "OtherAppAction (3)" in actions["detail"]
    assert "SendReceipt" not in actions["detail"]
    if app_db.dialect == "mariadb":
        assert "shared by every application on the server" in actions["detail"]
    # the people's table says the same
    text = ekbatan(tmp_path, "doctor", "--config", app, "--packages", "shopapp").stdout
    assert "sendd-receipt" in text and "refund-mailer" in text and "3 warning(s), 0 failed" in text


@pytest.mark.dialects("postgres", "mariadb")
def test_doctor_passes_the_application_checks_when_the_databases_agree(app, app_db, tmp_path):
    report = as_json(tmp_path, "doctor", "--config", app, "--packages", "shopapp")
    statuses = {c["check"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert statuses["task names"][0] == "pass"
    # an empty eventlog says nothing about which event types the actions record
    assert statuses["handlers"] == (
        "pass",
        "no event recorded yet: the handlers' event types cannot be checked",
    )
    assert statuses["eventlog actions"][0] == "pass"
    record(app_db, "SendReceipt", 1)
    report = as_json(tmp_path, "doctor", "--config", app, "--packages", "shopapp")
    assert {c["check"]: c["status"] for c in report["checks"]}["handlers"] == "warn"


@pytest.mark.dialects("postgres", "mariadb")
def test_doctor_without_packages_says_it_cannot_know_the_application(app, app_db, tmp_path):
    schedule_misspelled(app_db)
    report = as_json(tmp_path, "doctor", "--config", app)
    assert report["ok"] and {c["status"] for c in report["checks"]} == {"pass"}
    assert not checks_named(report, "task names")
    [note] = report["notes"]
    assert "not checked" in note and "--packages" in note
    assert f"note: {note}" in ekbatan(tmp_path, "doctor", "--config", app).stdout
    by_url = ekbatan(tmp_path, "doctor", "--url", app_db.url, "--packages", "shopapp", code=2)
    assert "--packages needs --config" in by_url.stderr


@pytest.mark.dialects("postgres", "mariadb")
def test_events_status_lists_every_handler_of_the_application(app, tmp_path):
    bare = as_json(tmp_path, "events", "status", "--config", app)
    assert bare["shards"][0]["handlers"] == []
    listed = as_json(tmp_path, "events", "status", "--config", app, "--packages", "shopapp")
    handlers = listed["shards"][0]["handlers"]
    assert [h["handler"] for h in handlers] == ["receipt-mailer", "refund-mailer"]
    for handler in handlers:
        assert handler == {
            "handler": handler["handler"],
            "pending": 0,
            "succeeded": 0,
            "failed": 0,
            "expired": 0,
            "most_attempts": 0,
            "oldest_open_age_seconds": None,
        }
    text = ekbatan(tmp_path, "events", "status", "--config", app, "--packages", "shopapp").stdout
    assert "refund-mailer" in text and "no notifications yet" not in text
