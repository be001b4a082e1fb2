"""The operator view's actions at a time and on held executions, on SQLite and PostgreSQL:
reschedule a scheduled execution and retry a dead one at a typed UTC time (a bad time is a 400
naming it and the format), retry every dead execution of a task from the overview, and drop a
held (paused or dead) execution — each guarded so that a row changed since the page changes
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from markupsafe import escape
from test_integrations_operator_actions import Forms, acting, done, submit
from test_integrations_operator_view import Seeded, seed

from ekbatan.distributed_jobs.scheduler import HoldState, SchedulerClient

DETAIL = "/executions/send-mail/later-1"
DEAD_DETAIL = "/executions/import-prices/bad-1"


@pytest.fixture
def seeded(database: Any) -> Iterator[Seeded]:
    engine = database.engine()
    yield Seeded(engine, seed(engine))


class TimeForms(HTMLParser):
    """The forms of a page with a time field: (action address, hidden fields) each."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self._timed = False
        self._current: tuple[str, dict[str, str]] | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("method") == "post":
            self._current, self._timed = (a["action"], {}), False
        elif tag == "input" and self._current is not None:
            if a.get("type") == "hidden":
                self._current[1][a["name"]] = a.get("value", "")
            elif a.get("name") == "at" and a.get("type") == "datetime-local":
                self._timed = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._current is not None:
            if self._timed:
                self.forms.append(self._current)
            self._current = None

    def find(self, action: str) -> tuple[str, dict[str, str]]:
        found = [(address, data) for address, data in self.forms if address.endswith(f"/actions/{action}")]
        assert len(found) == 1, (action, self.forms)
        return found[0]


def at_time(web: Any, page: str, action: str, at: str) -> Any:
    """Type ``at`` in the time field of ``page``'s ``action`` form, submit, and confirm."""
    address, data = TimeForms(web.get(page).text).find(action)
    asked = web.post(address, data={**data, "at": at})
    assert asked.status_code == 200 and 'id="question"' in asked.text, asked.text
    confirm_address, confirm = Forms(asked.text).find(action)
    assert confirm["at"] == at and confirm["confirm"] == "yes"
    return asked, web.post(confirm_address, data=confirm)


def due(client: SchedulerClient, task: str, instance: str) -> datetime:
    found = client.get_scheduled_execution((task, instance))
    assert found is not None, (task, instance)
    return found.execution_time


@pytest.mark.dialects("sqlite", "postgres")
def test_reschedule_and_retry_at_a_typed_utc_time(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        page = web.get(DETAIL).text
        assert "UTC" in page and 'type="datetime-local"' in page
        asked, answer = at_time(web, DETAIL, "reschedule", "2031-02-03T04:05")
        assert "Move execution send-mail/later-1 to run at 2031-02-03 04:05:00 UTC?" in asked.text
        location = done(answer, DETAIL)
        assert due(client, "send-mail", "later-1") == datetime(2031, 2, 3, 4, 5, tzinfo=UTC)
        assert "due at 2031-02-03 04:05:00 UTC" in web.get(location).text
        # seconds, as a datetime-local input with step=1 sends them
        done(at_time(web, DETAIL, "reschedule", "2031-02-03T04:05:06")[1], DETAIL)
        assert due(client, "send-mail", "later-1") == datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)

        asked, answer = at_time(web, DEAD_DETAIL, "retry-dead", "2032-06-07T08:09")
        assert "Run dead execution import-prices/bad-1 again at 2032-06-07 08:09:00 UTC?" in asked.text
        done(answer, DEAD_DETAIL)
        assert client.get_held_execution("import-prices", "bad-1") is None
        back = client.get_scheduled_execution(("import-prices", "bad-1"))
        assert back is not None and back.execution_time == datetime(2032, 6, 7, 8, 9, tzinfo=UTC)
        assert back.execution.consecutive_failures == 0


@pytest.mark.dialects("sqlite")
def test_a_bad_time_is_a_400_naming_it_and_the_format(seeded: Seeded):
    client = seeded.client
    before = due(client, "send-mail", "later-1")
    with acting(client) as web:
        address, data = TimeForms(web.get(DETAIL).text).find("reschedule")
        for bad in ("tomorrow", "2031-13-01T00:00", "2031-02-03 04:05", "2031-02-03T04:05Z", "<b>x</b>"):
            for confirmed in ({}, {"confirm": "yes"}):
                refused = web.post(address, data={**data, "at": bad, **confirmed})
                assert refused.status_code == 400, (bad, refused.text)
                assert str(escape(repr(bad))) in refused.text and "YYYY-MM-DDTHH:MM" in refused.text
                assert "<b>x</b>" not in refused.text
        missing = web.post(address, data={**data, "confirm": "yes"})
        assert missing.status_code == 400 and "No time given" in missing.text
        # to retry a dead one, no time is "now"; a bad one is refused the same way
        dead_address, dead = TimeForms(web.get(DEAD_DETAIL).text).find("retry-dead")
        refused = web.post(dead_address, data={**dead, "at": "31/12/2031", "confirm": "yes"})
        assert refused.status_code == 400 and str(escape("'31/12/2031' is not a time")) in refused.text
    assert due(client, "send-mail", "later-1") == before
    assert client.get_held_execution("import-prices", "bad-1") is not None


@pytest.mark.dialects("sqlite", "postgres")
def test_a_reschedule_of_a_row_changed_since_the_page_is_409(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        address, data = TimeForms(web.get(DETAIL).text).find("reschedule")
        moved = datetime.now(UTC) + timedelta(days=9)
        client.reschedule(("send-mail", "later-1"), moved)
        refused = web.post(address, data={**data, "at": "2031-02-03T04:05", "confirm": "yes"})
        assert refused.status_code == 409 and "changed since the page was read" in refused.text
    assert abs(due(client, "send-mail", "later-1") - moved) < timedelta(seconds=1)


def kill(client: SchedulerClient, task: str, instance: str) -> None:
    """Make a scheduled execution dead, as a scheduler does when its retries run out."""
    found = client.get_scheduled_execution((task, instance))
    assert found is not None
    assert client.repository.hold(found.execution, HoldState.DEAD, now=datetime.now(UTC), by="node-a")


@pytest.mark.dialects("sqlite", "postgres")
def test_retry_all_dead_of_a_task_from_the_overview(seeded: Seeded):
    client = seeded.client
    kill(client, "import-prices", "bad-2")  # two dead now: bad-1 and bad-2
    with acting(client) as web:
        overview = web.get("/").text
        buttons = [data["task"] for _, data in Forms(overview).forms if _.endswith("/actions/retry-all-dead")]
        assert buttons == ["import-prices"]  # only the task with dead executions
        address, data = Forms(overview).find("retry-all-dead", task="import-prices")
        asked = web.post(address, data=data)
        assert "Run all 2 dead execution(s) of task import-prices again?" in asked.text
        confirm_address, confirm = Forms(asked.text).find("retry-all-dead")
        location = done(web.post(confirm_address, data=confirm), "/")
        assert "2 dead execution(s) back in the schedule" in web.get(location).text
        assert client.get_held_executions(state=HoldState.DEAD, task_name="import-prices") == []
        for instance in ("bad-1", "bad-2"):
            assert due(client, "import-prices", instance) <= datetime.now(UTC)
        # nothing dead any more: the button is gone, and a stale form is a 409 that asks nothing
        assert not [a for a, _ in Forms(web.get("/").text).forms if a.endswith("/actions/retry-all-dead")]
        refused = web.post(address, data=data)
        assert refused.status_code == 409 and "no dead execution" in refused.text


@pytest.mark.dialects("sqlite", "postgres")
def test_cancel_drops_a_paused_or_dead_execution_for_good(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        paused = "/executions?task=send-mail&state=paused"
        address, data = Forms(web.get(paused).text).find("cancel-held", instance="later-2")
        assert data["state"] == "paused"
        asked = web.post(address, data=data)
        assert "Drop paused execution send-mail/later-2 for good?" in asked.text
        confirm_address, confirm = Forms(asked.text).find("cancel-held")
        location = done(web.post(confirm_address, data=confirm), paused)
        assert "Paused execution send-mail/later-2 dropped for good." in web.get(location).text
        assert client.get_held_execution("send-mail", "later-2") is None
        assert client.get_scheduled_execution(("send-mail", "later-2")) is None

        done(submit(web, DEAD_DETAIL, "cancel-held", state="dead"), "/executions?task=import-prices")
        assert client.get_held_execution("import-prices", "bad-1") is None
        assert client.get_scheduled_execution(("import-prices", "bad-1")) is None
        # the others are kept
        assert client.get_scheduled_execution(("import-prices", "bad-2")) is not None


@pytest.mark.dialects("sqlite", "postgres")
def test_a_held_execution_no_longer_held_as_the_page_showed_is_kept(seeded: Seeded):
    client = seeded.client
    with acting(client) as web:
        address, data = Forms(web.get("/executions/send-mail/later-2").text).find("cancel-held")
        # another operator resumed it: it is scheduled again, and stays so
        client.resume_execution(("send-mail", "later-2"))
        refused = web.post(address, data={**data, "confirm": "yes"})
        assert refused.status_code == 409 and "not held as paused" in refused.text
        assert client.get_scheduled_execution(("send-mail", "later-2")) is not None
        # a form with a state the page never shows is a 400
        bad = web.post(address, data={**data, "state": "scheduled", "confirm": "yes"})
        assert bad.status_code == 400 and "dead or paused" in bad.text


@pytest.mark.dialects("sqlite")
def test_the_new_actions_are_authorized_by_their_kind(seeded: Seeded):
    def only_view_and_pause(request: object, kind: str) -> bool:
        return kind in ("view", "pause")

    with acting(seeded.client, authorize=only_view_and_pause) as web:
        for page in ("/", DETAIL, DEAD_DETAIL, "/executions?task=send-mail&state=paused"):
            names = {address.rsplit("/", 1)[1] for address, _ in Forms(web.get(page).text).forms}
            assert not names & {"reschedule", "retry-dead", "retry-all-dead", "cancel-held"}, (page, names)
        _, data = Forms(web.get("/").text).find("pause-task", task="send-mail")
        for action, kind in (("reschedule", "run"), ("retry-all-dead", "retry"), ("cancel-held", "cancel")):
            refused = web.post(f"/actions/{action}", data={**data, "confirm": "yes"})
            assert refused.status_code == 403 and f"Not allowed to {kind}" in refused.text
