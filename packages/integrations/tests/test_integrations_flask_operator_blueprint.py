"""The operator view as a Flask blueprint (``Ekbatan.operator_blueprint``): unlike the mount, its
requests go through Flask, so the application's and the blueprint's ``before_request`` hooks
guard every page and action; links, the CSRF cookie and execution addresses are the mount's,
under the blueprint's prefix."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask, abort, request
from integrations_support import application_yml, sqlite_with_wallets

from ekbatan.core import load_settings, migrate
from ekbatan.distributed_jobs.scheduler import TaskInstance
from ekbatan.integrations.flask import Ekbatan

ADMIN = {"X-Admin": "ada"}
#: an instance id whose address holds quoted '/' (one leading, two together) and '%'
ODD_INSTANCE = "/tenant//7%off"


def guarded_app(tmp_path: Path, **options: object) -> tuple[Flask, Ekbatan]:
    """An application whose own hook refuses every request without the header."""
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    migrate(load_settings(config))
    app = Flask("guarded")
    app.config.update(EKBATAN_CONFIG=str(config), EKBATAN_AUTOSTART=False)
    ekbatan = Ekbatan(app)

    @app.before_request
    def current_admin() -> None:
        if request.endpoint != "hello" and not request.headers.get("X-Admin"):
            abort(401)
        # who acts, for the view: it runs outside Flask's context, and reads the environ
        request.environ["wallet.admin"] = request.headers.get("X-Admin")

    @app.get("/hello")
    def hello() -> str:
        return "hello"

    app.register_blueprint(ekbatan.operator_blueprint(**options))
    now = datetime.now(UTC)
    ekbatan.scheduler_client.schedule(TaskInstance("send-mail", ODD_INSTANCE), now - timedelta(minutes=1))
    ekbatan.scheduler_client.schedule(TaskInstance("reports", "weekly"), now + timedelta(days=1))
    return app, ekbatan


def csrf_token(page: str) -> str:
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    assert token is not None, page
    return token.group(1)


def test_without_the_hooks_consent_every_page_and_action_is_refused(tmp_path):
    app, ekbatan = guarded_app(tmp_path, read_only=False)
    web = app.test_client()
    assert web.get("/hello").get_data(as_text=True) == "hello"
    for path in ("/ekbatan/", "/ekbatan/executions", "/ekbatan/static/live.js", "/ekbatan/live"):
        assert web.get(path).status_code == 401, path
    action = web.post("/ekbatan/actions/pause-task", data={"task": "reports", "confirm": "yes"})
    assert action.status_code == 401
    assert ekbatan.scheduler_client.paused_tasks() == []
    # with it, the same addresses answer
    assert web.get("/ekbatan/", headers=ADMIN).status_code == 200
    script = web.get("/ekbatan/static/live.js", headers=ADMIN)
    # read whole, as a server would: a2wsgi leaves a response read in part pending
    assert script.status_code == 200 and "data-live" in script.get_data(as_text=True)
    assert not ekbatan.started(app)  # the pages read; they started nothing


def test_links_start_at_the_prefix_and_an_odd_instance_id_opens(tmp_path):
    app, _ = guarded_app(tmp_path)
    web = app.test_client()
    overview = web.get("/ekbatan/", headers=ADMIN)
    page = overview.get_data(as_text=True)
    assert overview.status_code == 200, page
    assert 'href="/ekbatan/executions?task=send-mail&amp;state=due"' in page
    assert 'src="/ekbatan/static/live.js' in page and '<body data-live="poll"' in page
    listing = web.get("/ekbatan/executions?task=send-mail", headers=ADMIN).get_data(as_text=True)
    link = "/ekbatan/executions/send-mail/%2Ftenant%2F%2F7%25off"
    assert f'href="{link}"' in listing
    detail = web.get(link, headers=ADMIN)
    assert detail.status_code == 200 and ODD_INSTANCE in detail.get_data(as_text=True)
    # the prefix without its '/' leads to the overview
    bare = web.get("/ekbatan", headers=ADMIN)
    assert bare.status_code == 308 and bare.headers["Location"].endswith("/ekbatan/")


def test_an_action_is_confirmed_and_done_by_whom_the_hook_named(tmp_path):
    app, ekbatan = guarded_app(
        tmp_path, read_only=False, actor=lambda request: request.scope["wsgi_environ"]["wallet.admin"]
    )
    web = app.test_client()
    page = web.get("/ekbatan/", headers=ADMIN)
    # the CSRF cookie belongs to the view's addresses only
    assert "Path=/ekbatan;" in page.headers["Set-Cookie"], page.headers["Set-Cookie"]
    form = {"csrf_token": csrf_token(page.get_data(as_text=True)), "task": "reports", "back": "/ekbatan/"}
    confirm = web.post("/ekbatan/actions/pause-task", data=form, headers=ADMIN)
    assert confirm.status_code == 200 and "Pause task reports?" in confirm.get_data(as_text=True)
    wrong_token = {**form, "csrf_token": "0" * 64, "confirm": "yes"}
    assert web.post("/ekbatan/actions/pause-task", data=wrong_token, headers=ADMIN).status_code == 403
    done = web.post(
        "/ekbatan/actions/pause-task", data={**form, "confirm": "yes", "reason": "month end"}, headers=ADMIN
    )
    assert done.status_code == 303 and done.headers["Location"].startswith("/ekbatan/?message=")
    (pause,) = ekbatan.scheduler_client.paused_tasks()
    assert (pause.task_name, pause.paused_by, pause.reason) == ("reports", "ada", "month end")


def test_the_blueprints_own_hook_guards_it_and_a_form_it_read_reaches_the_action(tmp_path):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    migrate(load_settings(config))
    app = Flask("blueprint_guarded")
    app.config.update(EKBATAN_CONFIG=str(config), EKBATAN_AUTOSTART=False)
    ekbatan = Ekbatan(app)
    operator = ekbatan.operator_blueprint(url_prefix="/ops", read_only=False)
    audited: list[str | None] = []

    @operator.before_request
    def operators_only() -> None:
        if request.headers.get("X-Role") != "operator":
            abort(403)
        if request.method == "POST":
            audited.append(request.form.get("task"))  # parsing the form reads the whole body

    app.register_blueprint(operator)
    ekbatan.scheduler_client.schedule(TaskInstance("reports", "weekly"), timedelta(days=1))
    web = app.test_client()
    assert web.get("/ops/").status_code == 403
    page = web.get("/ops/", headers={"X-Role": "operator"}).get_data(as_text=True)
    assert 'href="/ops/executions' in page
    form = {"csrf_token": csrf_token(page), "task": "reports", "back": "/ops/", "confirm": "yes"}
    assert web.post("/ops/actions/pause-task", data=form).status_code == 403
    done = web.post("/ops/actions/pause-task", data=form, headers={"X-Role": "operator"})
    assert done.status_code == 303, done.get_data(as_text=True)
    assert audited == ["reports"]
    assert [pause.task_name for pause in ekbatan.scheduler_client.paused_tasks()] == ["reports"]


@pytest.mark.parametrize("prefix", ["ops", "/ops/", "//ops"])
def test_a_bad_prefix_is_refused_with_what_to_write(tmp_path, prefix):
    app = Flask("badly_prefixed")
    app.config.update(EKBATAN_CONFIG=str(application_yml(tmp_path, "sqlite://")), EKBATAN_AUTOSTART=False)
    with pytest.raises(ValueError, match=r"write an absolute path without a trailing '/', e.g. '/ekbatan'"):
        Ekbatan(app).operator_blueprint(url_prefix=prefix)


def test_a_wrong_option_is_refused_when_the_blueprint_is_registered(tmp_path):
    app = Flask("wrongly_optioned")
    app.config.update(EKBATAN_CONFIG=str(application_yml(tmp_path, "sqlite://")), EKBATAN_AUTOSTART=False)
    blueprint = Ekbatan(app).operator_blueprint(live="push")
    with pytest.raises(ValueError, match=r"live='push'"):
        app.register_blueprint(blueprint)
