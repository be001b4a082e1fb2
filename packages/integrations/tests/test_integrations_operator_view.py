"""The operator view (``ekbatan.integrations.operator``): its pages read on SQLite and PostgreSQL
through a ``SchedulerClient`` against executions made by a real scheduler (failures, a dead
letter, history) and by the client's own calls (due, future, paused); and ``ekbatan ui`` served
as a real process."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from integrations_support import application_yml, ekbatan_ui
from starlette.testclient import TestClient

from ekbatan.distributed_jobs.scheduler import (
    FailureHandlers,
    Scheduler,
    SchedulerClient,
    SettableClock,
    Tasks,
    create_table,
)
from ekbatan.integrations.operator import operator_app

HOSTILE_TASK = "<script>alert(1)</script>"
HOSTILE_INSTANCE = '<img src=x onerror="alert(2)">&'
HOSTILE_DATA = {"html": "<script>alert(3)</script>"}
#: real time: "due" on the pages is due now
NOW = datetime.now(UTC)
T0 = NOW - timedelta(days=1, hours=1)


@dataclass
class Seeded:
    engine: sa.Engine
    client: SchedulerClient


def _import_prices(instance: object, ctx: object) -> None:
    if getattr(instance, "id", "").startswith("bad"):
        raise ValueError(f"no prices for {getattr(instance, 'id', '')} <b>feed</b>")


def seed(engine: sa.Engine) -> SchedulerClient:
    """import-prices: ok-1 ran and succeeded; bad-1 failed twice and is dead; bad-2 failed once
    (failing, retried tomorrow). send-mail: 3 due, 1 later, 1 paused one by one, 1 running.
    reports: 1 later, the task paused as a whole. And one hostile task."""
    create_table(engine)
    clock = SettableClock(T0)
    task = (
        Tasks.one_time("import-prices")
        .on_failure(FailureHandlers.max_retries(1).retry_every(timedelta(days=1)).then_dead_letter())
        .execute(_import_prices)
    )
    scheduler = Scheduler.create(engine, task).clock(clock).failure_logging("OFF").execution_history().build()
    try:
        scheduler.schedule(task.instance("ok-1"))
        scheduler.schedule(task.instance("bad-1"))
        assert scheduler.run_any_due_executions() == 2
        clock.advance(timedelta(days=1))
        scheduler.schedule(task.instance("bad-2"))
        assert scheduler.run_any_due_executions() == 2  # bad-1 dead now, bad-2 failing once
    finally:
        scheduler.stop()
    client = SchedulerClient(engine)
    mail = Tasks.one_time("send-mail", dict).execute(lambda instance, ctx: None)
    for n in (1, 2, 3):
        client.schedule(mail.instance(f"m-{n}", {"n": n}), NOW - timedelta(minutes=n))
    client.schedule(mail.instance("later-1"), NOW + timedelta(days=1))
    client.schedule(mail.instance("later-2"), NOW + timedelta(days=2))
    client.schedule(mail.instance("run-1"), NOW - timedelta(hours=2))
    assert client.pause_execution(("send-mail", "later-2"), reason="customer asked")
    # a scheduler node claims run-1 (written as a claim does: picked, by, heartbeat, version + 1)
    d = client.repository.dialect
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE scheduled_tasks SET picked = :t, picked_by = 'node-a', last_heartbeat = :hb, "
                "version = version + 1 WHERE task_name = 'send-mail' AND task_instance = 'run-1'"
            ),
            {"t": d.encode_bool(True), "hb": d.encode_time(NOW - timedelta(seconds=30))},
        )
    reports = Tasks.one_time("reports").execute(lambda instance, ctx: None)
    client.schedule(reports.instance("weekly"), NOW + timedelta(days=3))
    assert client.pause_task("reports", reason="month end")
    hostile = Tasks.one_time(HOSTILE_TASK, dict).execute(lambda instance, ctx: None)
    client.schedule(hostile.instance(HOSTILE_INSTANCE, HOSTILE_DATA), NOW + timedelta(hours=5))
    return client


@pytest.fixture
def seeded(database) -> Iterator[Seeded]:
    engine = database.engine()
    yield Seeded(engine, seed(engine))


@pytest.fixture
def web(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(operator_app(seeded.client)) as client:
        yield client


def overview_counts(page: str) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in re.findall(r'<tr data-task="(.*?)">(.*?)</tr>', page, re.S):
        task = html.unescape(row[0])
        cells = re.findall(r'data-state="(\w+)"><a href="[^"]*">(\d+)</a>', row[1])
        counts[task] = {state: int(n) for state, n in cells}
    return counts


def listed(page: str) -> list[tuple[str, str]]:
    """(task, instance) of each row of an executions page, unescaped."""
    rows = re.findall(
        r'<tr class="execution">\s*<td>.*?</td>\s*<td>(.*?)</td>\s*<td class="instance"><a href="[^"]*">(.*?)</a>',
        page,
        re.S,
    )
    return [(html.unescape(task), html.unescape(instance)) for task, instance in rows]


def next_link(page: str) -> str | None:
    found = re.search(r'<a class="next" rel="next" href="([^"]*)"', page)
    return None if found is None else html.unescape(found.group(1))


def state(s: str, **filters: str) -> dict[str, str]:
    return {"state": s, **filters}


@pytest.mark.dialects("sqlite", "postgres")
def test_overview_counts_each_state_per_task(web: TestClient):
    response = web.get("/")
    assert response.status_code == 200, response.text
    counts = overview_counts(response.text)
    zero = dict.fromkeys(("scheduled", "due", "running", "failing", "paused", "dead"), 0)
    assert counts["import-prices"] == {**zero, "failing": 1, "dead": 1}
    assert counts["send-mail"] == {**zero, "scheduled": 4, "due": 3, "running": 1, "paused": 1}
    assert counts["reports"] == {**zero, "scheduled": 1}
    assert counts[HOSTILE_TASK] == {**zero, "scheduled": 1}
    assert set(counts) == {"import-prices", "send-mail", "reports", HOSTILE_TASK}
    reports_row = re.search(r'<tr data-task="reports">(.*?)</tr>', response.text, re.S)
    assert reports_row is not None and "task paused" in reports_row.group(1)
    # last failure and next run of import-prices: bad-2's failure today, its retry tomorrow
    import_row = re.search(r'<tr data-task="import-prices">(.*?)</tr>', response.text, re.S)
    assert import_row is not None
    retry = (T0 + timedelta(days=2)).strftime("%Y-%m-%d %H:%M")
    assert retry in import_row.group(1)


@pytest.mark.dialects("sqlite", "postgres", "mariadb")
def test_executions_filter_by_state_and_instance_prefix(web: TestClient):
    def keys(**params: str) -> set[tuple[str, str]]:
        response = web.get("/executions", params=params)
        assert response.status_code == 200, response.text
        return set(listed(response.text))

    assert keys(state="due") == {("send-mail", f"m-{n}") for n in (1, 2, 3)}
    assert keys(state="running") == {("send-mail", "run-1")}
    assert keys(state="failing") == {("import-prices", "bad-2")}
    assert keys(state="dead") == {("import-prices", "bad-1")}
    assert keys(state="paused") == {("send-mail", "later-2")}
    assert keys(state="scheduled", task="send-mail") == {
        ("send-mail", i) for i in ("m-1", "m-2", "m-3", "later-1")
    }
    assert keys(prefix="m-") == {("send-mail", f"m-{n}") for n in (1, 2, 3)}
    assert keys(prefix="later", state="paused") == {("send-mail", "later-2")}
    assert keys(prefix="bad", state="dead") == {("import-prices", "bad-1")}
    assert keys(prefix="%") == set()  # a LIKE wildcard is a character here
    everything = keys()
    assert ("import-prices", "ok-1") not in everything  # it ran and succeeded: gone
    assert len(everything) == 8  # scheduled_tasks only: 2 import-prices rows are held or gone


# MariaDB too: a prefix listing reads its page's keys first, then the rows (a join there)
@pytest.mark.dialects("sqlite", "postgres", "mariadb")
def test_pagination_walks_every_execution_once(seeded: Seeded, web: TestClient):
    bulk = [Tasks.one_time(name).execute(lambda instance, ctx: None) for name in ("bulk-a", "bulk-b")]
    base = NOW + timedelta(days=10)
    # 120 rows, 20 distinct times: the same instance id at the same time under two task names
    for n in range(60):
        for task in bulk:
            seeded.client.schedule(task.instance(f"p-{n:03d}"), base + timedelta(minutes=n % 20))
    seen: list[tuple[str, str]] = []
    link: str | None = "/executions?prefix=p-"
    pages = []
    while link is not None:
        response = web.get(link)
        assert response.status_code == 200, response.text
        rows = listed(response.text)
        pages.append(len(rows))
        seen.extend(rows)
        link = next_link(response.text)
    assert pages == [50, 50, 20]
    assert len(seen) == len(set(seen)) == 120
    assert set(seen) == {(t, f"p-{n:03d}") for t in ("bulk-a", "bulk-b") for n in range(60)}
    # in due order, ties by task name then instance
    expected = sorted(
        ((n % 20, t, f"p-{n:03d}") for t in ("bulk-a", "bulk-b") for n in range(60)),
    )
    assert seen == [(t, i) for _, t, i in expected]
    # a smaller page size, carried by the links
    response = web.get("/executions", params={"prefix": "p-", "page_size": "7"})
    assert len(listed(response.text)) == 7 and "page_size=7" in (next_link(response.text) or "")


@pytest.mark.dialects("sqlite", "postgres", "mariadb")
def test_a_due_time_range_and_latest_first_page_through_every_row_once(seeded: Seeded, web: TestClient):
    bulk = [Tasks.one_time(name).execute(lambda instance, ctx: None) for name in ("bulk-a", "bulk-b")]
    base = (NOW + timedelta(days=10)).replace(second=0, microsecond=0)
    # 80 rows over 40 minutes, two per minute (the same instance id under two task names)
    for n in range(40):
        for task in bulk:
            seeded.client.schedule(task.instance(f"r-{n:03d}"), base + timedelta(minutes=n))
    start, end = base + timedelta(minutes=10), base + timedelta(minutes=30)
    window = {"from": start.strftime("%Y-%m-%dT%H:%M"), "until": end.strftime("%Y-%m-%dT%H:%M:%S")}

    def walk(**params: str) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        link: str | None = "/executions?" + urlencode({**params, "page_size": "7"})
        while link is not None:
            response = web.get(link)
            assert response.status_code == 200, response.text
            seen.extend(listed(response.text))
            link = next_link(response.text)
        return seen

    # from is inclusive, until exclusive: minutes 10 to 29, in due order, then latest first
    expected = [(t, f"r-{n:03d}") for n in range(10, 30) for t in ("bulk-a", "bulk-b")]
    assert walk(**window) == expected
    assert walk(**window, order="newest") == expected[::-1]
    # the range and the order are carried by the next page's link and shown in the form
    first = web.get("/executions", params={**window, "order": "newest", "page_size": "7"}).text
    carried = next_link(first) or ""
    assert "order=newest" in carried and "from=" in carried and "until=" in carried
    assert f'value="{start:%Y-%m-%dT%H:%M:%S}"' in first
    # every execution, latest first: the hostile one (in 5 h) comes after these (in 10 days)
    newest = listed(web.get("/executions", params={"order": "newest", "page_size": "500"}).text)
    assert newest[0] == ("bulk-b", "r-039") and newest.index((HOSTILE_TASK, HOSTILE_INSTANCE)) > 80


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"from": "yesterday"}, "from: 'yesterday' is not a time: write it in UTC as YYYY-MM-DDTHH:MM"),
        ({"until": "2030-13-01T00:00"}, "until: '2030-13-01T00:00' is not a time"),
        ({"from": "2030-01-02T00:00", "until": "2030-01-01T00:00"}, "must come after from"),
        ({"order": "oldest"}, "order must be one of due, newest, got 'oldest'"),
    ],
)
@pytest.mark.dialects("sqlite")
def test_a_bad_range_or_order_is_a_400_naming_it(web: TestClient, params: dict[str, str], says: str):
    response = web.get("/executions", params=params)
    assert response.status_code == 400 and says in html.unescape(response.text), response.text


@pytest.mark.dialects("sqlite", "postgres")
def test_detail_shows_the_row_and_its_history(web: TestClient):
    response = web.get("/executions/import-prices/bad-2")
    assert response.status_code == 200, response.text
    page = response.text
    assert re.search(r'id="failures">1<', page)
    assert re.search(r'id="picked">no<', page)
    assert re.search(r'id="state">failing', page)
    assert re.search(r'id="version">\d+<', page)
    # its one run, a failure with the error class, message (escaped) and traceback
    runs = re.findall(r'<tr class="run">(.*?)</tr>', page, re.S)
    assert len(runs) == 1 and '<td class="result">failed</td>' in runs[0]
    assert "ValueError: no prices for bad-2 &lt;b&gt;feed&lt;/b&gt;" in runs[0]
    assert "Traceback (most recent call last)" in runs[0]
    assert "<b>feed</b>" not in page

    running = web.get("/executions/send-mail/run-1").text
    assert re.search(r'id="picked-by">node-a<', running)
    # the heartbeat was written 30 s before NOW, which is fixed when this module is imported:
    # in a whole suite that can be minutes before the page is read ("12m 5s ago")
    age = re.search(r'id="heartbeat">[^<]*\(((?:\d+h )?(?:\d+m ?)?(?:\d+s)?) ago\)', running)
    assert age is not None and age.group(1), running

    dead = web.get("/executions/import-prices/bad-1")
    assert dead.status_code == 200
    assert re.search(r'id="state">dead', dead.text)
    assert len(re.findall(r'<tr class="run">', dead.text)) == 2  # newest first: two failures

    data = web.get("/executions/send-mail/m-2").text
    assert '"n": 2' in html.unescape(re.search(r'<pre id="data-json">(.*?)</pre>', data, re.S).group(1))  # type: ignore[union-attr]

    # ok-1 succeeded: its row is gone, its page stays while the history holds its run
    finished = web.get("/executions/import-prices/ok-1")
    assert finished.status_code == 200, finished.text
    assert re.search(r'id="state">finished', finished.text)
    runs = re.findall(r'<tr class="run">(.*?)</tr>', finished.text, re.S)
    assert len(runs) == 1 and '<td class="result">succeeded</td>' in runs[0]
    assert "Run now" not in finished.text and "Not kept" in finished.text
    never = web.get("/executions/import-prices/ok-404")
    assert never.status_code == 404
    assert "No execution import-prices/ok-404" in never.text


@pytest.mark.dialects("sqlite", "postgres")
def test_values_from_the_database_are_escaped(web: TestClient):
    pages = [web.get("/"), web.get("/executions"), web.get("/executions", params={"task": HOSTILE_TASK})]
    detail_link = re.search(r'<td class="instance"><a href="([^"]*)">', pages[2].text)
    assert detail_link is not None
    pages.append(web.get(html.unescape(detail_link.group(1))))
    for response in pages:
        assert response.status_code == 200, response.text
        assert "<script>" not in response.text
        assert "<img" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0].text
    detail = pages[3].text
    assert "&lt;img src=x onerror=&#34;alert(2)&#34;&gt;&amp;" in detail
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in detail  # the data, raw and as JSON


@pytest.mark.dialects("sqlite", "postgres")
def test_mounted_under_fastapi_the_links_stay_under_the_mount(seeded: Seeded):
    app = FastAPI()
    app.mount("/ekbatan", operator_app(seeded.client, title="wallet ops"))
    with TestClient(app) as client:
        overview = client.get("/ekbatan/")
        assert overview.status_code == 200 and "wallet ops" in overview.text
        hrefs = [html.unescape(h) for h in re.findall(r'href="([^"]*)"', overview.text)]
        assert hrefs and all(h.startswith("/ekbatan/") for h in hrefs), hrefs
        for href in hrefs:
            assert client.get(href).status_code == 200, href  # the stylesheet and every listing
        listing = client.get("/ekbatan/executions", params={"task": "send-mail"}).text
        details = [html.unescape(h) for h in re.findall(r'<td class="instance"><a href="([^"]*)"', listing)]
        assert details and all(h.startswith("/ekbatan/executions/send-mail/") for h in details)
        assert all(client.get(h).status_code == 200 for h in details)


@pytest.mark.dialects("sqlite")
def test_authorize_false_is_403_and_a_bad_page_size_is_400(seeded: Seeded):
    asked: list[str] = []

    def authorize(request: object, kind: str) -> bool:
        asked.append(kind)
        return False

    with TestClient(operator_app(seeded.client, authorize=authorize)) as client:
        for path in ("/", "/executions", "/executions/send-mail/m-1"):
            assert client.get(path).status_code == 403
        assert asked == ["view"] * 3
    with TestClient(operator_app(seeded.client, authorize=lambda request, kind: True)) as client:
        assert client.get("/").status_code == 200
        for bad in ("abc", "0", "501", "-3"):
            response = client.get("/executions", params={"page_size": bad})
            assert response.status_code == 400
            assert f"page_size must be a whole number from 1 to 500, got &#39;{bad}&#39;" in response.text
        assert client.get("/executions", params={"page_size": "500"}).status_code == 200
        bad_state = client.get("/executions", params={"state": "sleeping"})
        assert bad_state.status_code == 400 and "sleeping" in bad_state.text


def _seeded_config(directory: Path) -> str:
    """An application.yml on a new SQLite file holding :func:`seed`'s executions."""
    directory.mkdir()
    url = f"sqlite:///{directory / 'ui.sqlite'}"
    engine = sa.create_engine(url)
    try:
        client = seed(engine)
        assert client.get_scheduled_execution(("send-mail", "m-1")) is not None
    finally:
        engine.dispose()
    return str(application_yml(directory, url))


def test_ekbatan_ui_serves_the_view_and_asks_for_credentials_when_set(tmp_path: Path):
    plain = tmp_path / "plain"
    with ekbatan_ui(tmp_path, _seeded_config(plain), "--refresh-interval", "2") as served:
        response = httpx.get(served.base + "/", timeout=10)
        assert response.status_code == 200 and "send-mail" in response.text
        # SQLite notifies nothing: the page polls, at the interval asked
        assert '<body data-live="poll" data-live-interval="2.0"' in response.text

    secret = "s3cret-not-logged"
    guarded = _seeded_config(tmp_path / "guarded")
    with ekbatan_ui(
        tmp_path, guarded, env={"EKBATAN_UI_USER": "ops", "EKBATAN_UI_PASSWORD": secret}
    ) as served:
        refused = httpx.get(served.base + "/", timeout=10)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
        assert httpx.get(served.base + "/", auth=("ops", "wrong"), timeout=10).status_code == 401
        token = base64.b64encode(f"ops:{secret}".encode()).decode()
        allowed = httpx.get(served.base + "/", headers={"Authorization": f"Basic {token}"}, timeout=10)
        assert allowed.status_code == 200 and "send-mail" in allowed.text
    assert "basic authentication as ops" in served.stderr
    assert secret not in served.stderr


def test_ekbatan_ui_refuses_an_unknown_live_mode_naming_the_choices(tmp_path: Path):
    from click.testing import CliRunner

    from ekbatan.integrations.cli import main

    refused = CliRunner().invoke(
        main, ["ui", "--url", f"sqlite:///{tmp_path / 'ui.sqlite'}", "--live", "push"]
    )
    assert refused.exit_code == 2
    assert "'push' is not one of 'auto', 'sse', 'poll', 'off'" in refused.output


def test_a_scheduler_given_to_the_view_stands_for_its_client(seeded: Seeded) -> None:
    scheduler = Scheduler.create(seeded.engine).build()
    try:
        with TestClient(operator_app(scheduler)) as through_scheduler:
            page = through_scheduler.get("/")
        with TestClient(operator_app(seeded.client)) as through_client:
            expected = through_client.get("/")
    finally:
        scheduler.stop()
    assert page.status_code == 200, page.text
    assert overview_counts(page.text) == overview_counts(expected.text) != {}
