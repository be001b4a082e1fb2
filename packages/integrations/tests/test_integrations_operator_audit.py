"""Every confirmed action of the operator view is audited once — who, what, on what, why, and
what came of it — to the audit logger by default or to the application's own ``audit``; forms
only asked are not."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient
from test_integrations_operator_actions import Forms

from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance, create_table
from ekbatan.integrations.operator import AuditEntry, operator_app


@pytest.fixture
def client(database) -> SchedulerClient:
    engine = database.engine()
    create_table(engine)
    client = SchedulerClient(engine)
    client.schedule(TaskInstance("reports", "weekly"), datetime.now(UTC) + timedelta(days=1))
    return client


def pause_form(web: TestClient) -> tuple[str, dict[str, str]]:
    return Forms(web.get("/").text).find("pause-task", task="reports")


@pytest.mark.dialects("sqlite")
def test_the_applications_audit_gets_each_confirmed_action_done_or_refused(client: SchedulerClient):
    entries: list[AuditEntry] = []
    app = operator_app(client, read_only=False, audit=entries.append, actor=lambda request: "ops-oncall")
    with TestClient(app, follow_redirects=False) as web:
        address, form = pause_form(web)
        assert web.post(address, data=form).status_code == 200  # asked only: not an action yet
        assert entries == []
        done = web.post(address, data={**form, "confirm": "yes", "reason": "month end"})
        assert done.status_code == 303
        # run now, from a page read before the row changed: refused by the version guard
        stale = {"csrf_token": form["csrf_token"], "task": "reports", "instance": "weekly", "version": "999"}
        again = web.post("/actions/run-now", data={**stale, "confirm": "yes", "back": "/"})
        assert again.status_code == 409, again.text
    assert [(e.actor, e.action, e.kind, dict(e.target), e.done) for e in entries] == [
        ("ops-oncall", "pause-task", "pause", {"task": "reports"}, True),
        ("ops-oncall", "run-now", "run", {"task": "reports", "instance": "weekly", "version": "999"}, False),
    ]
    first, second = entries
    assert first.reason == "month end" and first.status == 303 and "paused" in first.message
    assert second.status == again.status_code and second.message
    assert first.at <= second.at


@pytest.mark.dialects("sqlite")
def test_by_default_each_action_is_a_line_of_the_audit_logger(client: SchedulerClient, caplog):
    with TestClient(operator_app(client, read_only=False), follow_redirects=False) as web:
        address, form = pause_form(web)
        with caplog.at_level(logging.INFO, logger="ekbatan.integrations.operator.audit"):
            assert (
                web.post(address, data={**form, "confirm": "yes", "reason": "db upgrade"}).status_code == 303
            )
    # read once the request is answered: the line is written before the answer
    (record,) = [r for r in caplog.records if r.name == "ekbatan.integrations.operator.audit"]
    assert record.levelno == logging.INFO
    line = record.getMessage()
    assert "'operator view' pause-task [task='reports'] reason='db upgrade': done" in line
