"""The operator view in a real browser: ``ekbatan ui`` served by uvicorn against real PostgreSQL
and MariaDB, driven by Debian's Chromium (headless, through Playwright): the overview, a filter,
paging, an execution's page, and a hostile task name shown as text and never run. Screenshots
are left in build/screenshots/ for a person to look at."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml

from ekbatan.distributed_jobs.scheduler import HoldState, SchedulerClient, TaskInstance
from testsupport import IsolatedDatabase, wait_until
from testsupport.browser import SCREENSHOTS, headless_chromium
from testsupport.private_servers import free_port

pytestmark = pytest.mark.slow

HOSTILE_TASK = "<script>window.ran = 1</script>"
HOSTILE_INSTANCE = "<img src=x onerror=alert(1)>"
DUE, LATER = 60, 5


def write_config(directory: Path, url: str) -> Path:
    member = {"member": 0, "configs": {"primary-config": {"url": url}, "jobs-config": {"url": url}}}
    document = {
        "ekbatan": {
            "sharding": {
                "default-shard": {"group": 0, "member": 0},
                "groups": [{"group": 0, "name": "global", "members": [member]}],
            }
        }
    }
    path = directory / "application.yml"
    path.write_text(yaml.safe_dump(document), "utf-8")
    return path


#: the ``ekbatan`` command, as a process
CLI = [sys.executable, "-m", "ekbatan.integrations.cli"]


def migrated_config(directory: Path, url: str) -> Path:
    """An application.yml on ``url``, its framework tables made by ``ekbatan migrate``."""
    config = write_config(directory, url)
    migrated = subprocess.run(
        [*CLI, "migrate", "--config", str(config)], capture_output=True, text=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    return config


#: the environment of the commands: no basic auth asked by an outer shell's variables
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EKBATAN_UI_")}


@contextmanager
def ekbatan(*args: str, cwd: Path | None = None) -> Iterator[subprocess.Popen[str]]:
    """``ekbatan ARGS`` as a process, stopped (SIGTERM, then SIGKILL) on the way out."""
    process = subprocess.Popen(
        [*CLI, *args], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@contextmanager
def operator_ui(config: Path, *flags: str) -> Iterator[str]:
    """``ekbatan ui`` on a free port, once it answers; yields its address."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with ekbatan("ui", "--config", str(config), "--port", str(port), *flags) as server:

        def answering() -> bool:
            assert server.poll() is None, server.communicate()
            try:
                return httpx.get(f"{base}/", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(answering, timeout=30, interval=0.1, message="ekbatan ui answering")
        yield base


@pytest.mark.dialects("postgres", "mariadb")
def test_an_operator_reads_the_scheduler_in_a_browser(
    dialect: str, database: IsolatedDatabase, tmp_path: Path
):
    config = migrated_config(tmp_path, database.url)
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    now = datetime.now(UTC)
    client = SchedulerClient(engine)
    client.schedule_batch(
        [TaskInstance("send-report", f"r-{i:03d}") for i in range(DUE)],
        execution_time=now - timedelta(minutes=1),
    )
    for i in range(LATER):
        client.schedule(TaskInstance("send-report", f"later-{i}"), now + timedelta(hours=1))
    client.schedule(TaskInstance(HOSTILE_TASK, HOSTILE_INSTANCE), now + timedelta(hours=2))
    engine.dispose()

    shots = SCREENSHOTS / dialect
    shots.mkdir(parents=True, exist_ok=True)
    with operator_ui(config) as base, headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 800})
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(f"{base}/")

        # the overview: one row per task, the counts read from the table
        report = page.locator('tr[data-task="send-report"]')
        assert report.locator('[data-state="scheduled"]').inner_text().strip() == str(DUE + LATER)
        assert report.locator('[data-state="due"]').inner_text().strip() == str(DUE)
        # the hostile name is text on the page, and nothing of it ran
        assert page.get_by_text(HOSTILE_TASK, exact=True).count() == 1
        assert page.evaluate("window.ran") is None and dialogs == []
        page.screenshot(path=str(shots / "overview.png"), full_page=True)

        # the due count links to the due executions of that task, 50 to a page
        report.locator('[data-state="due"] a').click()
        page.wait_for_load_state()
        rows = page.locator("tr.execution")
        assert rows.count() == 50
        first_page = rows.locator("td.instance").all_inner_texts()
        page.screenshot(path=str(shots / "executions.png"), full_page=True)
        page.locator("a.next").click()
        page.wait_for_load_state()
        second_page = page.locator("tr.execution td.instance").all_inner_texts()
        assert len(second_page) == DUE - 50 and page.locator("a.next").count() == 0
        assert sorted(first_page + second_page) == [f"r-{i:03d}" for i in range(DUE)]

        # the filter form: an instance prefix, any state
        page.goto(f"{base}/executions")
        page.fill('input[name="prefix"]', "later-")
        page.select_option('select[name="state"]', "")
        page.click('button[type="submit"]')
        page.wait_for_load_state()
        assert sorted(page.locator("tr.execution td.instance").all_inner_texts()) == [
            f"later-{i}" for i in range(LATER)
        ]

        # an execution's own page, reached by its link, the hostile one included
        page.goto(f"{base}/executions")
        page.fill('input[name="task"]', HOSTILE_TASK)
        page.click('button[type="submit"]')
        page.wait_for_load_state()
        page.locator("tr.execution td.instance a").click()
        page.wait_for_load_state()
        assert page.get_by_text(HOSTILE_INSTANCE, exact=True).count() >= 1
        assert page.evaluate("window.ran") is None and dialogs == []
        page.screenshot(path=str(shots / "execution.png"), full_page=True)
    assert (shots / "overview.png").stat().st_size > 0


TICKING_JOBS = '''
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs import DistributedJob, JobContext, Schedule, Schedules, distributed_job

ENGINE = sa.create_engine({url!r}, poolclass=sa.NullPool)


@distributed_job
class Tick(DistributedJob):
    """Inserts a row each run: the rows say whether it runs."""

    def name(self) -> str:
        return "tick"

    def schedule(self) -> Schedule:
        return Schedules.fixed_delay(timedelta(milliseconds=200))

    def execute(self, ctx: JobContext) -> None:
        with ENGINE.begin() as connection:
            connection.execute(sa.text("INSERT INTO ticks (at) VALUES (CURRENT_TIMESTAMP)"))
'''


@pytest.mark.dialects("postgres")
def test_an_operator_pauses_and_resumes_a_running_job_in_a_browser(
    database: IsolatedDatabase, tmp_path: Path
):
    config = migrated_config(tmp_path, database.url)
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE ticks (id SERIAL PRIMARY KEY, at TIMESTAMP NOT NULL)"))
    package = tmp_path / "tickjobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(TICKING_JOBS.format(url=database.url))

    def ticks() -> int:
        with engine.connect() as connection:
            return int(connection.execute(sa.text("SELECT count(*) FROM ticks")).scalar_one())

    shots = SCREENSHOTS / "postgres"
    shots.mkdir(parents=True, exist_ok=True)
    # the worker puts its working directory on the import path: tickjobs is found there
    with (
        ekbatan("worker", "--config", str(config), "--packages", "tickjobs", cwd=tmp_path) as worker,
        operator_ui(config, "--allow-actions") as base,
    ):
        assert worker.poll() is None, worker.communicate()
        wait_until(lambda: ticks() >= 2, timeout=30, interval=0.1, message="the worker runs tick")

        def settled() -> int | None:
            """The count once it stopped growing for a second (runs are every 200 ms)."""
            first = ticks()
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if ticks() != first:
                    return None
                time.sleep(0.05)
            return first

        with headless_chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{base}/")
            page.locator('tr[data-task="tick"] button[data-action="pause-task"]').click()
            page.wait_for_load_state()
            assert page.locator("#question").inner_text() == "Pause task tick?"
            page.fill('input[name="reason"]', "browser test")
            page.locator("#confirm").click()
            page.wait_for_load_state()
            assert "Task tick paused" in page.locator(".flash").inner_text()
            assert page.locator('tr[data-task="tick"] .badge.paused').count() == 1
            page.screenshot(path=str(shots / "paused.png"), full_page=True)

            stopped = wait_until(settled, timeout=10, interval=0, message="tick stops running")
            wait_until(lambda: ticks() == stopped and settled() == stopped, timeout=5, interval=0)

            page.locator('tr[data-task="tick"] button[data-action="resume-task"]').click()
            page.wait_for_load_state()
            page.locator("#confirm").click()
            page.wait_for_load_state()
            assert "Task tick resumed" in page.locator(".flash").inner_text()
            wait_until(lambda: ticks() >= stopped + 2, timeout=10, interval=0.1, message="tick runs again")
        engine.dispose()


#: the browser's switch of the tab's visibility, as minimising it or changing tabs does
SET_HIDDEN = """hidden => {
    Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
    Object.defineProperty(document, "visibilityState", {configurable: true, get: () => hidden ? "hidden" : "visible"});
    document.dispatchEvent(new Event("visibilitychange"));
}"""


@pytest.mark.dialects("postgres", "mariadb")
def test_an_open_overview_shows_new_work_without_a_reload_and_rests_while_hidden(
    dialect: str, database: IsolatedDatabase, tmp_path: Path
):
    config = migrated_config(tmp_path, database.url)
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    client = SchedulerClient(engine)
    later = datetime.now(UTC) + timedelta(hours=1)
    client.schedule(TaskInstance("send-report", "r-1"), later)
    # PostgreSQL notifies: the page follows a stream; MariaDB does not: the page polls (every 5 s)
    mode = "sse" if dialect == "postgres" else "poll"
    with operator_ui(config) as base, headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{base}/")
        page.wait_for_function("mode => window.ekbatanLive && window.ekbatanLive.state === mode", arg=mode)
        assert page.locator("#live-state").inner_text() == "live"

        client.schedule(TaskInstance("archive", "a-1"), later)
        page.wait_for_selector('tr[data-task="archive"]', timeout=15_000)
        assert page.evaluate("window.ekbatanLive.refreshes") >= 1

        # hidden, the page stops refreshing: new work shows only once it is visible again
        page.evaluate(SET_HIDDEN, True)
        assert page.evaluate("window.ekbatanLive.state") == "paused"
        assert page.locator("#live-state").inner_text() == "live: paused"
        refreshes = page.evaluate("window.ekbatanLive.refreshes")
        client.schedule(TaskInstance("cleanup", "c-1"), later)
        # longer than a poll's interval and far longer than a notified refresh takes
        page.wait_for_timeout(6_000)
        assert page.evaluate("window.ekbatanLive.refreshes") == refreshes
        assert page.locator('tr[data-task="cleanup"]').count() == 0

        page.evaluate(SET_HIDDEN, False)
        page.wait_for_selector('tr[data-task="cleanup"]', timeout=5_000)
        assert page.evaluate("window.ekbatanLive.state") == mode
    engine.dispose()


FLAKY_TASKS = '''
from datetime import timedelta

import sqlalchemy as sa

from ekbatan.distributed_jobs import one_time_task
from ekbatan.distributed_jobs.scheduler import OnFailureRetryLater

ENGINE = sa.create_engine({url!r}, poolclass=sa.NullPool)


@one_time_task("send-invoice", max_retries=2, on_failure=OnFailureRetryLater(timedelta(milliseconds=200)))
def send_invoice(instance, ctx):
    """Fails while the invoice server is down (a row the test flips); each send leaves a row."""
    with ENGINE.begin() as connection:
        if not connection.execute(sa.text("SELECT up FROM invoice_server")).scalar_one():
            raise ConnectionError("invoice server refused invoice " + instance.id)
        connection.execute(sa.text("INSERT INTO invoices_sent (instance_id) VALUES (:id)").bindparams(id=instance.id))
'''

INVOICE = ("send-invoice", "order-1045")
REFUSED = "ConnectionError: invoice server refused invoice order-1045"

#: every <details> of the page opened (the tracebacks), as an operator reading them does
OPEN_DETAILS = "() => document.querySelectorAll('main details').forEach(d => { d.open = true; })"
ALL_OPEN = "() => [...document.querySelectorAll('main details')].every(d => d.open)"


@pytest.mark.dialects("postgres", "mariadb")
def test_an_operator_retries_a_dead_execution_in_a_browser_and_it_succeeds(
    dialect: str, database: IsolatedDatabase, tmp_path: Path
):
    config = migrated_config(tmp_path, database.url)
    # the worker looks for due work every 200 ms, not every 10 s: retries and the operator's
    # retry are picked up at once
    document = yaml.safe_load(config.read_text("utf-8"))
    document["ekbatan"]["jobs"] = {"polling-interval": "PT0.2S"}
    config.write_text(yaml.safe_dump(document), "utf-8")
    engine = sa.create_engine(database.url, poolclass=sa.NullPool)
    with engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE invoice_server (up INTEGER NOT NULL)"))
        connection.execute(sa.text("INSERT INTO invoice_server (up) VALUES (0)"))
        connection.execute(sa.text("CREATE TABLE invoices_sent (instance_id VARCHAR(100) NOT NULL)"))
    package = tmp_path / "invoicejobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(FLAKY_TASKS.format(url=database.url))
    client = SchedulerClient(engine)

    def sent() -> list[str]:
        with engine.connect() as connection:
            return list(connection.execute(sa.text("SELECT instance_id FROM invoices_sent")).scalars())

    def results() -> list[str]:
        """The runs of the invoice the history holds, oldest first."""
        return [run.result.value for run in reversed(client.history(*INVOICE))]

    shots = SCREENSHOTS / dialect
    shots.mkdir(parents=True, exist_ok=True)
    with (
        ekbatan("worker", "--config", str(config), "--packages", "invoicejobs", cwd=tmp_path) as worker,
        operator_ui(config, "--allow-actions") as base,
    ):
        client.schedule(TaskInstance(*INVOICE), datetime.now(UTC))

        def dead() -> bool:
            assert worker.poll() is None, worker.communicate()
            held = client.get_held_execution(*INVOICE)
            # the history is written off the runs' path, a moment after the row is moved
            return held is not None and held.state is HoldState.DEAD and len(results()) == 3

        wait_until(dead, timeout=60, interval=0.1, message="the invoice is dead after its retries")
        # once and two retries, all refused; nothing was sent
        assert results() == ["failed", "failed", "dead"] and sent() == []

        with headless_chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{base}/")
            invoice = page.locator('tr[data-task="send-invoice"]')
            assert invoice.locator('[data-state="dead"]').inner_text().strip() == "1"
            assert invoice.locator('button[data-action="retry-all-dead"]').count() == 1

            # "Retry dead…" lists the task's dead executions, each with its own Retry
            invoice.locator("a.retry-dead").click()
            page.wait_for_load_state()
            dead_listing = page.url
            [row] = page.locator("tr.execution").all()
            assert row.locator("td.instance").inner_text() == "order-1045"
            assert row.locator("td.state").inner_text().strip() == "dead"

            # the execution's page: dead, with the error and traceback of the run that ended it,
            # and each failed run in its history
            row.locator("td.instance a").click()
            page.wait_for_load_state()
            assert page.locator("#state").inner_text().startswith("dead")
            assert page.locator("#failures").inner_text() == "3"
            assert page.locator("table.fields td.error").inner_text() == REFUSED
            # the traceback is folded: the operator opens it
            page.locator("main > details > summary").click()
            traceback = page.locator("main > details pre").inner_text()
            assert traceback.startswith("Traceback (most recent call last):")
            assert traceback.rstrip().endswith(REFUSED) and "invoicejobs/tasks.py" in traceback
            runs = page.locator("table.history tr.run")
            assert runs.locator("td.result").all_inner_texts() == ["dead", "failed", "failed"]
            assert runs.locator("span.error").all_inner_texts() == [REFUSED] * 3

            # every traceback opened, as an operator reading them does; the page's live refresh
            # (every 5 s on either database) keeps them open
            page.evaluate(OPEN_DETAILS)
            refreshes = page.evaluate("window.ekbatanLive.refreshes")
            page.wait_for_function("n => window.ekbatanLive.refreshes > n", arg=refreshes, timeout=15_000)
            assert page.evaluate(ALL_OPEN)
            page.screenshot(path=str(shots / "dead.png"), full_page=True)

            # the cause is fixed outside the browser: the invoice server is up again
            with engine.begin() as connection:
                connection.execute(sa.text("UPDATE invoice_server SET up = 1"))

            page.goto(dead_listing)
            page.locator('tr.execution button[data-action="retry-dead"]').click()
            page.wait_for_load_state()
            assert (
                page.locator("#question").inner_text() == "Run dead execution send-invoice/order-1045 again?"
            )
            page.locator("#confirm").click()
            page.wait_for_load_state()
            assert page.locator(".flash").inner_text() == "1 execution(s) back in the schedule."
            # back in the schedule, it is no longer dead, whether or not the worker ran it yet
            assert page.locator("tr.execution").count() == 0

            def succeeded() -> bool:
                assert worker.poll() is None, worker.communicate()
                return (
                    client.get_held_execution(*INVOICE) is None
                    and client.get_scheduled_execution(INVOICE) is None
                    and results()[-1:] == ["succeeded"]
                )

            wait_until(succeeded, timeout=60, interval=0.1, message="the retried invoice is sent")
            # sent once, by the run after the three refused ones
            assert results() == ["failed", "failed", "dead", "succeeded"] and sent() == ["order-1045"]

            page.goto(f"{base}/")
            assert invoice.locator('[data-state="dead"]').inner_text().strip() == "0"
            assert invoice.locator('button[data-action="retry-all-dead"]').count() == 0
    engine.dispose()
