"""``ekbatan ui`` (a real process) shows the event pipeline of every shard and re-drives on each,
with nothing but the jobs pool and the shards' pools: it builds no runtime and starts no
scheduler. Two shards on SQLite and PostgreSQL, seeded as ``ekbatan events redrive``'s test seeds
them; and a database without eventlog tables, whose page answers without the panel."""

from __future__ import annotations

import html
import re
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from integrations_support import AppDatabase, application_yml, ekbatan_ui
from test_integrations_events_redrive import (
    FRESH,
    REPORTS,
    Shards,
    shards,  # noqa: F401 (the fixture `application` builds on)
    two_shard_yml,
)
from test_integrations_operator_actions import Forms

from ekbatan.distributed_jobs.scheduler import SchedulerClient, create_table

#: the application given with --packages: ``mail`` has notifications, ``ledger`` none yet
HANDLERS_PACKAGE = """
from ekbatan.core import ModelEvent
from ekbatan.local_event_handler import EventEnvelope, EventHandler, event_handler


class MoneyDeposited(ModelEvent):
    amount: int


@event_handler
class Mail(EventHandler[MoneyDeposited]):
    def name(self) -> str:
        return "mail"

    def event_type(self) -> type[MoneyDeposited]:
        return MoneyDeposited

    def handle(self, envelope: EventEnvelope[MoneyDeposited]) -> None:
        return None


@event_handler
class Ledger(EventHandler[MoneyDeposited]):
    def name(self) -> str:
        return "ledger"

    def event_type(self) -> type[MoneyDeposited]:
        return MoneyDeposited

    def handle(self, envelope: EventEnvelope[MoneyDeposited]) -> None:
        return None
"""
SHARD_NAMES = ["global/member-0", "global/member-1"]
#: the overview's counts of one handler, as each seeded shard holds them
MAIL, AUDIT, LEDGER = (
    {"pending": 0, "failed": 1, "expired": 1},
    {"pending": 0, "failed": 1, "expired": 0},
    {"pending": 0, "failed": 0, "expired": 0},
)


def pipeline_panel(page: str) -> dict[str, dict[str, dict[str, int]]]:
    """Per shard table of the overview's event pipeline, per handler row, its counts."""
    panel: dict[str, dict[str, dict[str, int]]] = {}
    for shard, table in re.findall(r'<table class="pipeline" data-shard="(.*?)">(.*?)</table>', page, re.S):
        panel[html.unescape(shard)] = {
            html.unescape(handler): {
                name: int(count)
                for name, count in re.findall(r'data-pipeline="(pending|failed|expired)">(\d+)<', row)
            }
            for handler, row in re.findall(r'<tr data-handler="(.*?)">(.*?)</tr>', table, re.S)
        }
    return panel


def scheduled_rows(url: str) -> list[tuple[str, str, bool, int]]:
    """Every row of ``scheduled_tasks``: a started scheduler would add its recurring jobs' rows
    (the event pipeline's, for the --packages handlers) and claim what is due."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            found = connection.execute(
                sa.text("SELECT task_name, task_instance, picked, version FROM scheduled_tasks")
            ).all()
    finally:
        engine.dispose()
    return sorted((r.task_name, r.task_instance, bool(r.picked), r.version) for r in found)


@pytest.fixture
def application(shards: Shards, tmp_path: Path) -> Shards:  # noqa: F811 (the imported fixture)
    """``shards`` (two migrated shards with ``FRESH`` notifications each), a due execution on
    the jobs pool, and the --packages application in ``tmp_path``."""
    engine = sa.create_engine(shards.databases[0].url)
    try:
        SchedulerClient(engine).schedule(REPORTS.instance("weekly"), datetime.now(UTC) - timedelta(hours=1))
    finally:
        engine.dispose()
    (tmp_path / "uiapp").mkdir()
    (tmp_path / "uiapp" / "__init__.py").write_text(textwrap.dedent(HANDLERS_PACKAGE), "utf-8")
    return shards


@pytest.mark.slow
@pytest.mark.dialects("sqlite", "postgres")
def test_ekbatan_ui_shows_each_shards_pipeline_and_redrives_on_every_shard(
    application: Shards, tmp_path: Path
) -> None:
    jobs_url = application.databases[0].url
    due_before = scheduled_rows(jobs_url)
    assert due_before == [("reports", "weekly", False, 1)]
    with ekbatan_ui(tmp_path, application.config, "--allow-actions", "--packages", "uiapp") as served:
        with httpx.Client(base_url=served.base, timeout=10) as browser:
            page = browser.get("/")
            assert page.status_code == 200, page.text
            # one table per shard; ledger listed by --packages before its first notification
            expected = {"audit": AUDIT, "ledger": LEDGER, "mail": MAIL}
            assert pipeline_panel(page.text) == dict.fromkeys(SHARD_NAMES, expected)

            # the button of the first shard's table; its re-drive covers every shard
            buttons = [
                (address, fields)
                for address, fields in Forms(page.text).forms
                if address.endswith("/actions/redrive")
                and (fields["handler"], fields["states"]) == ("mail", "FAILED")
            ]
            assert len(buttons) == 2 and buttons[0][1]["csrf_token"]
            address, button = buttons[0]
            asked = browser.post(address, data=button)
            assert asked.status_code == 200, asked.text
            assert "Send the FAILED notifications of handler mail back to PENDING" in asked.text
            assert "on every shard (2)" in asked.text
            assert application.states() == [FRESH] * 2  # asked only: nothing changed yet

            confirm_address, confirm = Forms(asked.text).find("redrive")
            assert confirm["confirm"] == "yes" and confirm["csrf_token"] == button["csrf_token"]
            done = browser.post(confirm_address, data=confirm)
            assert done.status_code == 303, done.text
            shown = browser.get(done.headers["location"]).text
            assert "2 FAILED notification(s) of handler mail back to PENDING" in shown
            for name in SHARD_NAMES:
                assert f"shard {name}: 1" in html.unescape(shown)
            redriven = [
                ("audit", "FAILED", 4),
                ("mail", "EXPIRED", 4),
                ("mail", "PENDING", 0),
                ("mail", "SUCCEEDED", 4),
            ]
            assert application.states() == [redriven] * 2
            after = {"audit": AUDIT, "ledger": LEDGER, "mail": {"pending": 1, "failed": 0, "expired": 1}}
            assert pipeline_panel(shown) == dict.fromkeys(SHARD_NAMES, after)

            # a form without the CSRF token changes nothing
            forged = browser.post("/actions/redrive", data={**confirm, "csrf_token": "x"})
            assert forged.status_code == 403
            assert application.states() == [redriven] * 2
        # no scheduler in the process: no recurring row of the pipeline's jobs, the due
        # execution not claimed (same version), after every page above was served
        assert scheduled_rows(jobs_url) == due_before
        assert served.process.poll() is None
    assert "the event pipeline of 2 shard(s)" in served.stderr, served.stderr


@pytest.mark.slow
@pytest.mark.dialects("sqlite", "postgres")
def test_ekbatan_ui_without_eventlog_tables_answers_without_the_panel(
    app_db: AppDatabase, tmp_path: Path
) -> None:
    engine = sa.create_engine(app_db.url)
    try:
        create_table(engine)  # scheduled_tasks only: the eventlog was never migrated
        SchedulerClient(engine).schedule(REPORTS.instance("weekly"), datetime.now(UTC) + timedelta(days=1))
    finally:
        engine.dispose()
    config = str(application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog))
    with ekbatan_ui(tmp_path, config) as served:
        page = httpx.get(served.base + "/", timeout=10)
        assert page.status_code == 200, page.text
        assert "reports" in page.text  # the tasks are read as ever
        assert "Event pipeline" not in page.text and pipeline_panel(page.text) == {}
        # read-only: the re-drive is refused before it reaches a shard
        refused = httpx.post(served.base + "/actions/redrive", data={"handler": "mail"}, timeout=10)
        assert refused.status_code == 403
    assert "the event pipeline of 1 shard(s)" in served.stderr, served.stderr


@pytest.mark.dialects("sqlite")
def test_ekbatan_ui_leaves_out_a_sqlite_shard_whose_file_is_not_there(
    app_db: AppDatabase, tmp_path: Path
) -> None:
    engine = sa.create_engine(app_db.url)
    try:
        create_table(engine)
    finally:
        engine.dispose()
    typo = tmp_path / "typo.sqlite"
    config = two_shard_yml(tmp_path, [app_db, AppDatabase("sqlite", f"sqlite:///{typo}", "eventlog")])
    with ekbatan_ui(tmp_path, config) as served:
        assert httpx.get(served.base + "/", timeout=10).status_code == 200
    assert not typo.exists()  # never connected: connecting would have created it empty
    assert f"no event pipeline for shard global/member-1: no SQLite database at {typo}" in served.stderr
    assert "the event pipeline of 1 shard(s)" in served.stderr, served.stderr
