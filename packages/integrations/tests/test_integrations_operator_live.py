"""The operator pages' live refresh: ``/live`` streams server-sent ``refresh`` events — at once
when another process schedules on PostgreSQL (one listening connection for all open streams,
closed with the last), once per interval elsewhere — and each page says in its ``<body>`` how
it refreshes. The stream is read from a real uvicorn server: Starlette's test client buffers a
whole response, and this one never ends by itself."""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from ekbatan.distributed_jobs.scheduler import SchedulerClient, TaskInstance, create_table
from ekbatan.integrations.operator import operator_app
from testsupport import wait_until
from testsupport.private_servers import free_port


@contextmanager
def served(app: Starlette) -> Iterator[str]:
    """``app`` under uvicorn on a thread of this process; yields its address."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=15, message="uvicorn started")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def events(url: str) -> Iterator[queue.Queue[tuple[str, str]]]:
    """The stream at ``url`` read on a thread: (event, data) pairs as they come. Read over a
    plain socket (HTTP/1.0: no chunked framing), so that leaving can close it from this thread
    as a closed tab would."""
    address = httpx.URL(url)
    connection = socket.create_connection((address.host, address.port), timeout=10)
    connection.sendall(
        f"GET {address.raw_path.decode()} HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    stream = connection.makefile("rb")
    status = stream.readline().decode()
    assert " 200 " in status, status
    headers = []
    while (line := stream.readline().decode().strip()) != "":
        headers.append(line.lower())
    assert "content-type: text/event-stream; charset=utf-8" in headers, headers
    connection.settimeout(None)
    received: queue.Queue[tuple[str, str]] = queue.Queue()

    def read() -> None:
        fields: dict[str, str] = {}
        try:
            for raw in stream:
                line = raw.decode().rstrip("\r\n")
                if not line:
                    if "data" in fields:  # a block without data (the retry alone) is no event
                        received.put((fields.get("event", "message"), fields["data"]))
                    fields = {}
                    continue
                name, _, value = line.partition(":")
                fields[name] = value.strip()
        except (OSError, ValueError):
            pass  # closed from the test's side: the page went away

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield received
    finally:
        connection.shutdown(socket.SHUT_RDWR)
        connection.close()
        reader.join(10)


def next_event(received: queue.Queue[tuple[str, str]], timeout: float) -> tuple[str, str]:
    try:
        return received.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no event within {timeout}s") from None


def listening_connections(engine: sa.Engine) -> int:
    """Sessions whose last statement was a LISTEN on an ekbatan channel (PostgreSQL)."""
    with engine.connect() as connection:
        count = connection.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN \"ekbatan_%'"
            )
        ).scalar_one()
    return int(count)


def body_live(page: str) -> str:
    found = re.search(r'<body data-live="(\w+)"', page)
    assert found is not None, page[:300]
    return found.group(1)


@pytest.fixture
def client(database) -> SchedulerClient:
    engine = database.engine()
    create_table(engine)
    return SchedulerClient(engine)


@pytest.mark.dialects("postgres")
def test_a_schedule_by_another_process_refreshes_at_once_through_one_listening_connection(
    database, client: SchedulerClient
):
    engine = database.engine()
    before = listening_connections(engine)
    # an interval far longer than the test: every refresh seen here was woken by a notification
    app = operator_app(client, refresh_interval=120)
    with served(app) as base:
        page = httpx.get(f"{base}/", timeout=10).text
        assert body_live(page) == "sse" and "live.js" in page
        with events(f"{base}/live") as first, events(f"{base}/live") as second:
            wait_until(
                lambda: listening_connections(engine) == before + 1,
                timeout=10,
                message="one LISTEN for two streams",
            )
            # another client, as another process would: its schedule notifies at commit
            SchedulerClient(engine).schedule(
                TaskInstance("mail", "m-1"), datetime.now(UTC) + timedelta(hours=1)
            )
            assert next_event(first, 10) == ("refresh", "change")
            assert next_event(second, 10) == ("refresh", "change")
            assert listening_connections(engine) == before + 1
        # both streams gone: the watch stops and its connection closes
        wait_until(lambda: listening_connections(engine) == before, timeout=20, message="the LISTEN closed")


@pytest.mark.dialects("sqlite", "mariadb")
def test_where_nothing_notifies_pages_poll_and_the_stream_ticks_once_per_interval(client: SchedulerClient):
    app = operator_app(client, refresh_interval=0.5)
    with served(app) as base:
        page = httpx.get(f"{base}/", timeout=10).text
        assert body_live(page) == "poll" and 'data-live-interval="0.5"' in page
        with events(f"{base}/live") as received:
            started = time.monotonic()
            assert next_event(received, 10) == ("refresh", "tick")
            assert next_event(received, 10) == ("refresh", "tick")
            # two ticks: at least one interval and the gap between refreshes apart
            assert time.monotonic() - started >= 0.5


@pytest.mark.dialects("sqlite")
def test_only_pages_read_whole_refresh_and_live_off_serves_no_stream(client: SchedulerClient):
    with TestClient(operator_app(client, live="poll")) as web:
        assert body_live(web.get("/").text) == "poll"
        assert body_live(web.get("/executions").text) == "poll"
        missing = web.get("/executions/none/such")
        assert missing.status_code == 404 and body_live(missing.text) == "off"
        assert "live.js" not in missing.text
    with TestClient(operator_app(client, live="off")) as web:
        page = web.get("/").text
        assert body_live(page) == "off" and "live.js" not in page and 'id="live-state"' not in page
        assert web.get("/live").status_code == 404


@pytest.mark.dialects("sqlite")
def test_a_function_source_is_asked_at_each_request(client: SchedulerClient):
    asked: list[int] = []

    def source() -> SchedulerClient:
        asked.append(1)
        return client

    with TestClient(operator_app(source, live="off")) as web:
        assert web.get("/").status_code == 200
        assert web.get("/executions").status_code == 200
    assert len(asked) >= 2


@pytest.mark.dialects("sqlite")
def test_bad_live_settings_are_refused_naming_the_value(client: SchedulerClient):
    with pytest.raises(ValueError, match=r"live='push'.*'auto', 'sse', 'poll', 'off'"):
        operator_app(client, live="push")
    with pytest.raises(ValueError, match=r"refresh_interval=0.*above 0"):
        operator_app(client, refresh_interval=0)
    with pytest.raises(ValueError, match=r"refresh_interval='5'.*a number of seconds"):
        operator_app(client, refresh_interval="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="EkbatanRuntime, a SchedulerClient or a function"):
        operator_app("postgresql://db/app")  # type: ignore[arg-type]
