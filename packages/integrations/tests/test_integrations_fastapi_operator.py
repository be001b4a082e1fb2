"""The operator view behind a FastAPI application's own dependencies: ``operator_router``'s one
catch-all route runs them first (a refusing one refuses every page, action and stream), then
hands the request to the view under the prefix it was included with — links, the CSRF cookie,
raw execution addresses, ``request.state`` and the ``/live`` stream all as under a mount."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest
import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.testclient import TestClient
from test_integrations_operator_live import served

from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance, create_table
from ekbatan.integrations.fastapi import operator_router

ADMIN = {"x-admin": "ada"}
#: an instance id whose address holds a quoted '/' and '%'
ODD_INSTANCE = "tenant/7%off"


def current_admin(request: Request) -> str:
    """The application's own authentication: refuses without the header, else names the user."""
    user = request.headers.get("x-admin")
    if not user:
        raise HTTPException(status_code=401, detail="log in first")
    request.state.admin = user
    return user


@pytest.fixture
def client(tmp_path: Path) -> SchedulerClient:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    create_table(engine)
    scheduler = SchedulerClient(engine)
    now = datetime.now(UTC)
    scheduler.schedule(TaskInstance("send-mail", ODD_INSTANCE), now - timedelta(minutes=1))
    scheduler.schedule(TaskInstance("reports", "weekly"), now + timedelta(days=1))
    return scheduler


def guarded_app(client: SchedulerClient, **options: object) -> FastAPI:
    app = FastAPI()

    @app.get("/hello")
    def hello() -> str:
        return "hello"

    router = operator_router(client, dependencies=[Depends(current_admin)], **options)
    app.include_router(router, prefix="/ekbatan")
    return app


def test_without_the_dependencys_consent_every_page_and_action_is_refused(client: SchedulerClient):
    with TestClient(guarded_app(client, read_only=False)) as http:
        assert http.get("/hello").text == '"hello"'  # the application's own routes stay open
        for path in ("/ekbatan/", "/ekbatan/executions", "/ekbatan/static/live.js", "/ekbatan/live"):
            refused = http.get(path)
            assert refused.status_code == 401 and refused.json() == {"detail": "log in first"}, path
        action = http.post("/ekbatan/actions/pause-task", data={"task": "reports", "confirm": "yes"})
        assert action.status_code == 401
        assert client.paused_tasks() == []
        # with it, the same addresses answer
        assert http.get("/ekbatan/", headers=ADMIN).status_code == 200
        assert http.get("/ekbatan/static/live.js", headers=ADMIN).status_code == 200


def test_links_start_at_the_prefix_and_an_odd_instance_id_opens(client: SchedulerClient):
    with TestClient(guarded_app(client)) as http:
        overview = http.get("/ekbatan/", headers=ADMIN)
        assert overview.status_code == 200, overview.text
        assert 'href="/ekbatan/executions?task=send-mail&amp;state=due"' in overview.text
        assert 'src="/ekbatan/static/live.js' in overview.text
        listing = http.get("/ekbatan/executions", params={"task": "send-mail"}, headers=ADMIN).text
        link = "/ekbatan/executions/send-mail/tenant%2F7%25off"
        assert f'href="{link}"' in listing
        detail = http.get(link, headers=ADMIN)
        assert detail.status_code == 200 and "tenant/7%off" in detail.text
        # the prefix without its '/' leads to the overview
        bare = http.get("/ekbatan", headers=ADMIN, follow_redirects=False)
        assert bare.status_code == 307 and bare.headers["location"].endswith("/ekbatan/")


def test_an_action_is_confirmed_and_done_by_whom_the_dependency_named(client: SchedulerClient):
    app = guarded_app(client, read_only=False, actor=lambda request: request.state.admin)
    with TestClient(app) as http:
        page = http.get("/ekbatan/", headers=ADMIN)
        # the CSRF cookie belongs to the view's addresses only
        assert "Path=/ekbatan;" in page.headers["set-cookie"], page.headers["set-cookie"]
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text)
        assert token is not None, page.text
        form = {"csrf_token": token.group(1), "task": "reports", "back": "/ekbatan/"}
        confirm = http.post("/ekbatan/actions/pause-task", data=form, headers=ADMIN)
        assert confirm.status_code == 200 and "Pause task reports?" in confirm.text
        without_token = {**form, "csrf_token": "0" * 64, "confirm": "yes"}
        assert http.post("/ekbatan/actions/pause-task", data=without_token, headers=ADMIN).status_code == 403
        done = http.post(
            "/ekbatan/actions/pause-task",
            data={**form, "confirm": "yes", "reason": "month end"},
            headers=ADMIN,
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"].startswith("/ekbatan/?message=")
    (pause,) = client.paused_tasks()
    assert (pause.task_name, pause.paused_by, pause.reason) == ("reports", "ada", "month end")


# without the body given again, the view would wait for one the client sent already: a hang
@pytest.mark.timeout(60)
def test_a_dependency_that_read_the_form_leaves_it_for_the_action(client: SchedulerClient):
    audited_tasks: list[str] = []

    async def audited(request: Request) -> None:
        form = parse_qs((await request.body()).decode())
        audited_tasks.extend(form.get("task", []))

    app = FastAPI()
    app.include_router(
        operator_router(client, read_only=False, dependencies=[Depends(audited)]), prefix="/ekbatan"
    )
    with TestClient(app) as http:
        page = http.get("/ekbatan/").text
        token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
        assert token is not None, page
        form = {"csrf_token": token.group(1), "task": "reports", "back": "/ekbatan/", "confirm": "yes"}
        done = http.post("/ekbatan/actions/pause-task", data=form, follow_redirects=False)
        assert done.status_code == 303, done.text
    assert audited_tasks == ["reports"]
    assert [pause.task_name for pause in client.paused_tasks()] == ["reports"]


def test_the_live_stream_answers_through_the_router_as_it_goes(client: SchedulerClient):
    # SQLite notifies nothing: the stream ticks once per interval, and never ends by itself
    app = guarded_app(client, live="sse", refresh_interval=0.5)
    with served(app) as base:
        assert httpx.get(f"{base}/ekbatan/live", timeout=10).status_code == 401
        page = httpx.get(f"{base}/ekbatan/", headers=ADMIN, timeout=10).text
        assert '<body data-live="sse"' in page
        # read as it comes: a stream buffered on the way would never answer (it never ends)
        with httpx.stream("GET", f"{base}/ekbatan/live", headers=ADMIN, timeout=10) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("event:")) == "event: refresh"
            assert next(lines) == "data: tick"
