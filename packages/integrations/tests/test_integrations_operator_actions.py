"""The operator view's actions (``operator_app(read_only=False)``) on SQLite and PostgreSQL:
each button, submitted as the page renders it, changes what it says (read back through the
client) after a confirmation; CSRF, the version guard, read-only and ``authorize`` per kind
refuse and change nothing."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from markupsafe import escape
from starlette.testclient import TestClient
from test_integrations_operator_view import HOSTILE_INSTANCE, HOSTILE_TASK, Seeded, seed

from ekbatan.distributed_jobs.scheduler import HoldState, SchedulerClient
from ekbatan.integrations.operator import operator_app


class Forms(HTMLParser):
    """The POST forms of a page: (action address, fields) each."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("method") == "post":
            self.forms.append((a["action"], {}))
        elif tag == "input" and self.forms and a.get("type") == "hidden":
            self.forms[-1][1][a["name"]] = a.get("value", "")

    def find(self, action: str, **fields: str) -> tuple[str, dict[str, str]]:
        found = [
            (address, data)
            for address, data in self.forms
            if address.endswith(f"/actions/{action}") and all(data.get(k) == v for k, v in fields.items())
        ]
        assert len(found) == 1, (action, fields, self.forms)
        return found[0]


@pytest.fixture
def seeded(database: Any) -> Iterator[Seeded]:
    engine = database.engine()
    yield Seeded(engine, seed(engine))


def acting(client: SchedulerClient, **options: Any) -> TestClient:
    return TestClient(operator_app(client, read_only=False, **options), follow_redirects=False)


def submit(web: TestClient, page: str, action: str, **fields: str) -> Any:
    """Press a button of ``page`` and confirm on the page that asks."""
    address, data = Forms(web.get(page).text).find(action, **fields)
    asked = web.post(address, data=data)
    assert asked.status_code == 200 and 'id="question"' in asked.text, asked.text
    confirm_address, confirm = Forms(asked.text).find(action)
    assert confirm["confirm"] == "yes"
    return web.post(confirm_address, data=confirm)


def done(response: Any, back: str) -> str:
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith(back) and "message=" in location
    return location


@pytest.mark.dialects("sqlite", "postgres")
def test_each_action_changes_what_it_says(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        # pause and resume a task name, from the overview; the pause names who and why
        address, data = Forms(web.get("/").text).find("pause-task", task="send-mail")
        asked = web.post(address, data=data)
        confirm_address, confirm = Forms(asked.text).find("pause-task")
        location = done(web.post(confirm_address, data={**confirm, "reason": "deploy"}), "/")
        pause = next(p for p in client.paused_tasks() if p.task_name == "send-mail")
        assert (pause.paused_by, pause.reason) == ("operator view", "deploy")
        shown = web.get(location).text
        assert "Task send-mail paused" in shown and 'class="flash"' in shown
        done(submit(web, "/", "resume-task", task="send-mail"), "/")
        assert "send-mail" not in {p.task_name for p in client.paused_tasks()}
        # resuming the task put its execution paused one by one back too
        assert client.get_scheduled_execution(("send-mail", "later-2")) is not None

        # pause and resume one execution, from the listing
        listing = "/executions?task=send-mail"
        version = client.get_scheduled_execution(("send-mail", "later-1")).execution.version  # type: ignore[union-attr]
        done(submit(web, listing, "pause-execution", instance="later-1", version=str(version)), listing)
        held = client.get_held_execution("send-mail", "later-1")
        assert held is not None and held.state is HoldState.PAUSED and held.held_by == "operator view"
        assert client.get_scheduled_execution(("send-mail", "later-1")) is None
        done(
            submit(web, "/executions?task=send-mail&state=paused", "resume-execution", instance="later-1"),
            "/",
        )
        assert client.get_held_execution("send-mail", "later-1") is None
        after_resume = client.get_scheduled_execution(("send-mail", "later-1"))
        assert after_resume is not None and after_resume.execution_time > datetime.now(UTC) + timedelta(
            hours=20
        )

        # run now, from its detail page: due now, nothing else moved
        detail = "/executions/send-mail/later-1"
        before = datetime.now(UTC)
        done(submit(web, detail, "run-now", instance="later-1"), detail)
        now_due = client.get_scheduled_execution(("send-mail", "later-1"))
        assert now_due is not None and before - timedelta(
            seconds=5
        ) <= now_due.execution_time <= datetime.now(UTC)
        other = client.get_scheduled_execution(("send-mail", "later-2"))
        assert other is not None and other.execution_time > datetime.now(UTC) + timedelta(days=1)

        # retry the dead letter, from the dead listing the overview links to
        overview = web.get("/").text
        assert 'class="retry-dead" href="/executions?task=import-prices&amp;state=dead"' in overview
        dead = "/executions?task=import-prices&state=dead"
        done(submit(web, dead, "retry-dead", instance="bad-1"), dead)
        assert client.get_held_execution("import-prices", "bad-1") is None
        back = client.get_scheduled_execution(("import-prices", "bad-1"))
        assert back is not None and back.execution.consecutive_failures == 0

        # cancel, from the listing: that one gone, the others kept
        done(submit(web, listing, "cancel", instance="m-1"), listing)
        assert client.get_scheduled_execution(("send-mail", "m-1")) is None
        assert client.get_scheduled_execution(("send-mail", "m-2")) is not None
        # a running execution offers no button
        assert not [f for f in Forms(web.get(listing).text).forms if f[1].get("instance") == "run-1"]


@pytest.mark.dialects("sqlite", "postgres")
def test_a_wrong_or_missing_csrf_token_is_403_and_changes_nothing(seeded: Seeded):
    with acting(seeded.client) as web:
        address, data = Forms(web.get("/").text).find("pause-task", task="send-mail")
        confirmed = {**data, "confirm": "yes"}
        for bad in (
            {**confirmed, "csrf_token": "0" * 64},
            {k: v for k, v in confirmed.items() if k != "csrf_token"},
        ):
            refused = web.post(address, data=bad)
            assert refused.status_code == 403 and "CSRF" in refused.text
        # the right token without the browser's cookie: refused too
        with acting(seeded.client) as stranger:
            assert stranger.post(address, data=confirmed).status_code == 403
        # a token of another app (another secret), with that app's cookie
        with acting(seeded.client) as other:
            other.get("/")
            _, theirs = Forms(other.get("/").text).find("pause-task", task="send-mail")
            web.cookies.set("ekbatan_csrf", other.cookies["ekbatan_csrf"])
            assert web.post(address, data={**theirs, "confirm": "yes"}).status_code == 403
    assert "send-mail" not in {p.task_name for p in seeded.client.paused_tasks()}


@pytest.mark.dialects("sqlite", "postgres")
def test_a_post_without_confirmation_asks_and_changes_nothing(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        page = f"/executions?task={HOSTILE_TASK}"
        address, data = Forms(web.get("/executions", params={"task": HOSTILE_TASK}).text).find("cancel")
        asked = web.post(address, data=data)
        assert asked.status_code == 200
        question = f"Cancel execution {HOSTILE_TASK}/{HOSTILE_INSTANCE}?"
        assert str(escape(question)) in asked.text and HOSTILE_TASK not in asked.text
        assert client.get_scheduled_execution((HOSTILE_TASK, HOSTILE_INSTANCE)) is not None
        confirm_address, confirm = Forms(asked.text).find("cancel")
        location = done(web.post(confirm_address, data=confirm), "/executions?")
        assert page.split("?")[0] in location
        assert client.get_scheduled_execution((HOSTILE_TASK, HOSTILE_INSTANCE)) is None
        # the message, with the hostile name in it, is shown as text
        shown = web.get(location).text
        assert str(escape(f"{HOSTILE_TASK}/{HOSTILE_INSTANCE} cancelled.")) in shown
        assert HOSTILE_TASK not in shown


@pytest.mark.dialects("sqlite", "postgres")
def test_a_row_changed_since_the_page_is_409_and_changes_nothing(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        page = web.get("/executions?task=send-mail").text
        for action in ("run-now", "cancel", "pause-execution"):
            address, data = Forms(page).find(action, instance="later-1")
            # another operator moves it after this page was read: a new version
            moved = datetime.now(UTC) + timedelta(days=7)
            client.reschedule(("send-mail", "later-1"), moved)
            refused = web.post(address, data={**data, "confirm": "yes"})
            assert refused.status_code == 409 and "changed since the page was read" in refused.text
            kept = client.get_scheduled_execution(("send-mail", "later-1"))
            assert kept is not None and abs(kept.execution_time - moved) < timedelta(seconds=1)
            assert client.get_held_execution("send-mail", "later-1") is None
        # picked by a scheduler (at the version the page would show): refused, still running
        running = client.get_scheduled_execution(("send-mail", "run-1"))
        assert running is not None and running.is_picked
        version = str(running.execution.version)
        address, data = Forms(page).find("cancel", instance="m-1")
        data = {**data, "instance": "run-1", "version": version, "confirm": "yes"}
        refused = web.post(address, data=data)
        assert refused.status_code == 409 and "running now" in refused.text
        assert client.get_scheduled_execution(("send-mail", "run-1")) is not None
        # gone: cancelled elsewhere
        address, data = Forms(page).find("run-now", instance="m-2")
        client.cancel(("send-mail", "m-2"))
        refused = web.post(address, data={**data, "confirm": "yes"})
        assert refused.status_code == 409 and "no longer scheduled" in refused.text


@pytest.mark.dialects("sqlite", "postgres")
def test_read_only_shows_no_buttons_and_refuses_every_post(seeded: Seeded):
    with acting(seeded.client) as web:
        address, data = Forms(web.get("/").text).find("pause-task", task="send-mail")
    with TestClient(operator_app(seeded.client)) as read_only:
        for path in ("/", "/executions?task=send-mail", "/executions/send-mail/later-1"):
            assert Forms(read_only.get(path).text).forms == []
        token = Forms(read_only.get("/").text)  # the cookie is set; no form to take a token from
        assert token.forms == []
        refused = read_only.post(address, data={**data, "confirm": "yes"})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert "send-mail" not in {p.task_name for p in seeded.client.paused_tasks()}


@pytest.mark.dialects("sqlite")
def test_authorize_is_asked_per_kind(seeded: Seeded):
    asked: list[str] = []

    def authorize(request: object, kind: str) -> bool:
        asked.append(kind)
        return kind in ("view", "pause")

    client = seeded.client
    with acting(client, authorize=authorize) as web:
        listing = web.get("/executions?task=send-mail").text
        names = {address.rsplit("/", 1)[1] for address, _ in Forms(listing).forms}
        assert names == {"pause-execution"}  # no run-now, no cancel
        with acting(client) as everything:
            address, data = Forms(everything.get("/executions?task=send-mail").text).find(
                "cancel", instance="m-1"
            )
        web.cookies.set("ekbatan_csrf", everything.cookies["ekbatan_csrf"])
        asked.clear()
        refused = web.post(address, data={**data, "confirm": "yes"})
        assert refused.status_code == 403 and "Not allowed to cancel" in refused.text and asked == ["cancel"]
        assert client.get_scheduled_execution(("send-mail", "m-1")) is not None
        asked.clear()
        done(submit(web, "/", "pause-task", task="send-mail"), "/")
        assert "pause" in asked and "send-mail" in {p.task_name for p in client.paused_tasks()}


@pytest.mark.dialects("sqlite")
def test_the_actor_is_kept_with_a_pause_and_back_stays_on_the_app(seeded: Seeded):
    client = seeded.client
    with acting(client, actor=lambda request: "alice") as web:
        done(submit(web, "/", "pause-task", task="send-mail"), "/")
    assert next(p for p in client.paused_tasks() if p.task_name == "send-mail").paused_by == "alice"
    basic = {"Authorization": "Basic " + base64.b64encode(b"bob:secret").decode()}
    with TestClient(operator_app(client, read_only=False), follow_redirects=False, headers=basic) as web:
        address, data = Forms(web.get("/").text).find("pause-task", task=HOSTILE_TASK)
        answer = web.post(address, data={**data, "confirm": "yes", "back": "https://evil.example/"})
        assert answer.status_code == 303 and answer.headers["location"].startswith("/?message=")
    assert next(p for p in client.paused_tasks() if p.task_name == HOSTILE_TASK).paused_by == "bob"
