"""The operator view served from a Flask application: ``Ekbatan.mount_operator_view`` puts the
pages under a path beside the app's own routes, reading through the extension's runtime (built
in the serving process, never started by the pages), refreshing by polling, and its actions
work through WSGI as they do through ASGI."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import load_settings, migrate
from ekbatan.distributed_jobs.scheduler import TaskInstance
from ekbatan.integrations.flask import Ekbatan


def operated_app(tmp_path, **options) -> tuple[Flask, Ekbatan]:
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    migrate(load_settings(config))
    app = Flask("operated")
    app.config.update(EKBATAN_CONFIG=str(config), EKBATAN_AUTOSTART=False)
    ekbatan = Ekbatan(app)

    @app.get("/hello")
    def hello() -> str:
        return "hello"

    ekbatan.mount_operator_view(app, "/ops", **options)
    return app, ekbatan


def test_the_pages_answer_under_the_mount_path_beside_the_apps_routes(tmp_path):
    app, ekbatan = operated_app(tmp_path)
    ekbatan.scheduler_client.schedule(
        TaskInstance("send-mail", "m-1"), datetime.now(UTC) - timedelta(minutes=1)
    )
    web = app.test_client()
    assert web.get("/hello").get_data(as_text=True) == "hello"
    overview = web.get("/ops/")
    page = overview.get_data(as_text=True)
    assert overview.status_code == 200, page
    assert '<tr data-task="send-mail">' in page
    # links and assets under the mount; the page polls (no stream through WSGI)
    assert 'href="/ops/executions"' in page and 'src="/ops/static/live.js?v=' in page
    assert '<body data-live="poll"' in page
    assert web.get("/ops/static/live.js").status_code == 200
    listing = web.get("/ops/executions?task=send-mail").get_data(as_text=True)
    assert 'href="/ops/executions/send-mail/m-1"' in listing
    assert web.get("/ops/executions/send-mail/m-1").status_code == 200
    # read-only by default; the pages started nothing
    assert "read-only" in page
    assert not ekbatan.started(app)


def test_an_action_through_wsgi_is_confirmed_and_done(tmp_path):
    app, ekbatan = operated_app(tmp_path, read_only=False, actor=lambda request: "ops-oncall")
    ekbatan.scheduler_client.schedule(
        TaskInstance("reports", "weekly"), datetime.now(UTC) + timedelta(days=1)
    )
    web = app.test_client()
    page = web.get("/ops/").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    assert token is not None, page
    form = {"csrf_token": token.group(1), "task": "reports", "back": "/ops/"}
    confirm = web.post("/ops/actions/pause-task", data=form)
    assert confirm.status_code == 200 and "Pause task reports?" in confirm.get_data(as_text=True)
    done = web.post("/ops/actions/pause-task", data={**form, "confirm": "yes", "reason": "month end"})
    assert done.status_code == 303 and done.headers["Location"].startswith("/ops/?message=")
    (pause,) = ekbatan.scheduler_client.paused_tasks()
    assert (pause.task_name, pause.paused_by, pause.reason) == ("reports", "ops-oncall", "month end")


@pytest.mark.parametrize("path", ["ops", "/ops/", "//ops"])
def test_a_bad_mount_path_is_refused_with_what_to_write(tmp_path, path):
    app = Flask("badly_mounted")
    app.config.update(EKBATAN_CONFIG=str(application_yml(tmp_path, "sqlite://")), EKBATAN_AUTOSTART=False)
    with pytest.raises(ValueError, match=r"write an absolute path without a trailing '/', e.g. '/ekbatan'"):
        Ekbatan(app).mount_operator_view(app, path)
