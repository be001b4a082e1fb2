"""A configurable CSRF secret: replicas of the operator view given the same one accept each
other's action forms; too short a secret is refused saying what to write; the secret is never
shown (repr, error, ``ekbatan ui``'s output). ``ekbatan ui`` reads it from EKBATAN_UI_SECRET."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient
from test_integrations_operator_actions import Forms

from ekbatan.distributed_jobs.scheduler import SchedulerClient, Tasks, create_table
from ekbatan.integrations.cli import main
from ekbatan.integrations.operator import operator_app
from ekbatan.integrations.operator.csrf import Csrf

SHARED = "a-shared-secret-of-32-characters"
REPORTS = Tasks.one_time("reports").execute(lambda instance, ctx: None)


@pytest.fixture
def client(tmp_path: Any) -> SchedulerClient:
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ui.sqlite'}")
    create_table(engine)
    scheduler = SchedulerClient(engine)
    scheduler.schedule(REPORTS.instance("weekly"))
    return scheduler


def pause_form(web: TestClient) -> tuple[str, dict[str, str]]:
    return Forms(web.get("/").text).find("pause-task", task="reports")


def confirmed_on(other: TestClient, web: TestClient, form: dict[str, str]) -> int:
    """The answer of ``other`` to a form read from ``web``, sent with ``web``'s cookie."""
    other.cookies.set("ekbatan_csrf", web.cookies["ekbatan_csrf"])
    return other.post("/actions/pause-task", data={**form, "confirm": "yes"}).status_code


def test_replicas_with_the_same_secret_accept_each_others_forms(client: SchedulerClient):
    options = {"read_only": False}
    with (
        TestClient(operator_app(client, **options, csrf_secret=SHARED), follow_redirects=False) as first,
        TestClient(operator_app(client, **options, csrf_secret=SHARED.encode()), follow_redirects=False) as second,
        TestClient(operator_app(client, **options, csrf_secret="another-secret-32-characters-xx"), follow_redirects=False) as stranger,
        TestClient(operator_app(client, **options), follow_redirects=False) as random_secret,
    ):  # fmt: skip
        _, form = pause_form(first)
        assert confirmed_on(stranger, first, form) == 403
        assert confirmed_on(random_secret, first, form) == 403
        assert client.paused_tasks() == []
        assert confirmed_on(second, first, form) == 303  # str and its UTF-8 bytes: one key
        assert [p.task_name for p in client.paused_tasks()] == ["reports"]


@pytest.mark.parametrize("secret", ["too-short", b"\x00" * 15, ""])
def test_too_short_a_secret_is_refused_saying_what_to_write(client: SchedulerClient, secret: str | bytes):
    with pytest.raises(ValueError, match="needs at least 16") as refused:
        operator_app(client, read_only=False, csrf_secret=secret)
    assert "secrets.token_hex(32)" in str(refused.value)
    if secret:
        assert str(secret) not in str(refused.value) and repr(secret) not in str(refused.value)
    with pytest.raises(TypeError, match="str or bytes"):
        Csrf(16 * 8)  # type: ignore[arg-type]


def test_the_secret_is_not_in_the_repr():
    assert SHARED not in repr(Csrf(SHARED)) and repr(Csrf(SHARED)) == "Csrf(secret=***)"


def test_ekbatan_ui_reads_the_secret_from_its_variable(tmp_path: Any, monkeypatch: pytest.MonkeyPatch):
    import uvicorn

    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    migrated = CliRunner().invoke(main, ["migrate", "--url", url])
    assert migrated.exit_code == 0, migrated.output
    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(app))
    monkeypatch.delenv("EKBATAN_UI_USER", raising=False)
    monkeypatch.delenv("EKBATAN_UI_PASSWORD", raising=False)
    monkeypatch.setenv("EKBATAN_UI_SECRET", SHARED)
    for _ in range(2):  # two replicas
        result = CliRunner().invoke(main, ["ui", "--url", url, "--allow-actions"])
        assert result.exit_code == 0, result.output
        assert "CSRF key from EKBATAN_UI_SECRET" in result.output and SHARED not in result.output
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        client = SchedulerClient(engine)
        client.schedule(REPORTS.instance("weekly"))
        with (
            TestClient(served[0], follow_redirects=False) as one,
            TestClient(served[1], follow_redirects=False) as two,
        ):
            _, form = pause_form(one)
            assert confirmed_on(two, one, form) == 303
        assert [p.task_name for p in client.paused_tasks()] == ["reports"]
    finally:
        engine.dispose()

    monkeypatch.setenv("EKBATAN_UI_SECRET", "short-one")
    refused = CliRunner().invoke(main, ["ui", "--url", url, "--allow-actions"])
    assert refused.exit_code == 1 and len(served) == 2
    assert "EKBATAN_UI_SECRET: csrf_secret is 9 bytes; it needs at least 16" in refused.output
    assert "short-one" not in refused.output
