"""FastAPI: the lifespan builds, starts and stops Ekbatan; dependencies, non-blocking calls and
the readiness endpoint, driven in process through TestClient (which runs the lifespan)."""

from __future__ import annotations

import signal
import threading
import uuid
from contextlib import asynccontextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from dependency_injector import containers, providers
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from integrations_beacon import Beacon, three_threads
from integrations_sample.domain import Base, Deposit, DepositParams
from integrations_sample.handlers import DepositLedger
from integrations_support import application_yml, sqlite_with_wallets
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from ekbatan.core import Action, SettingsError
from ekbatan.distributed_jobs import DistributedJob, JobContext, JobRegistryError, Schedules
from ekbatan.distributed_jobs.scheduler import TaskInstance
from ekbatan.integrations.fastapi import (
    ActionExecutorDep,
    EkbatanRuntimeDep,
    SchedulerClientDep,
    ekbatan_lifespan,
    health_report,
    health_router,
    run_action,
    schedule_task,
)
from ekbatan.integrations.options import EkbatanOptions
from testsupport import wait_until


class AppContainer(containers.DeclarativeContainer):
    ledger = providers.Singleton(DepositLedger)


def wallet_app(lifespan: Any) -> FastAPI:
    """The endpoints a wallet application would have, using Ekbatan's dependencies."""
    app = FastAPI(lifespan=lifespan)

    @app.post("/deposits")
    async def deposit(body: DepositParams, executor: ActionExecutorDep) -> dict[str, str]:
        return {"balance": str(await run_action(executor, Deposit, body))}

    @app.post("/sync-deposits")
    def sync_deposit(body: DepositParams, executor: ActionExecutorDep) -> dict[str, str]:
        return {"balance": str(executor.execute(Deposit, body))}  # a def endpoint runs in a thread

    @app.post("/reminders/{key}")
    async def remind(key: str, client: SchedulerClientDep) -> dict[str, bool]:
        created = await schedule_task(client, TaskInstance("reminder", key))
        row = await run_in_threadpool(client.get_scheduled_execution, ("reminder", key))
        await run_in_threadpool(client.cancel, ("reminder", key))
        return {"created": created, "found": row is not None}

    @app.get("/runtime")
    async def runtime(ekbatan: EkbatanRuntimeDep) -> dict[str, Any]:
        return {"started": ekbatan.started, "jobs": [job.name() for job in ekbatan.jobs]}

    return app


def scheduled_rows(url: str) -> list[tuple[str, bool]]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT task_name, picked FROM scheduled_tasks").all()
    finally:
        engine.dispose()
    return sorted((name, bool(picked)) for name, picked in rows)


def create_wallets(url: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()


def ekbatan_threads() -> set[threading.Thread]:
    """The scheduler's threads alive now (poller, workers, heartbeats, ...)."""
    return {t for t in threading.enumerate() if t.name.startswith("ekbatan-") and t.is_alive()}


@pytest.mark.dialects("sqlite", "postgres")
def test_the_app_runs_the_whole_product(app_db, tmp_path):
    config = application_yml(tmp_path, app_db.url, eventlog=app_db.eventlog)
    container = AppContainer()
    ledger = container.ledger()
    sigterm, sigint = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    create_wallets(app_db.url)  # the application's own migration, before the top-up job runs
    app = wallet_app(ekbatan_lifespan(config, ["integrations_sample"], container, migrate_on_start=True))
    assert not hasattr(app.state, "ekbatan")  # nothing is built before the application starts
    with TestClient(app) as client:
        runtime = app.state.ekbatan
        assert runtime.started and runtime.job_registry.scheduler.is_started
        # the framework's lifecycle owns start and stop: no signal handler of Ekbatan's
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == (sigterm, sigint)
        assert client.get("/runtime").json() == {
            "started": True,
            "jobs": ["wallet-top-up", "ekbatan-event-fanout", "ekbatan-event-handling"],
        }
        wallet = uuid.uuid4()
        first = client.post("/deposits", json={"wallet_id": str(wallet), "amount": "5"})
        assert first.status_code == 200 and Decimal(first.json()["balance"]) == 5
        second = client.post("/sync-deposits", json={"wallet_id": str(wallet), "amount": "2.5"})
        assert Decimal(second.json()["balance"]) == Decimal("7.5")
        assert client.post("/reminders/r-1").json() == {"created": True, "found": True}
        wait_until(
            lambda: sorted(a for w, a in ledger.deposits if w == str(wallet)) == [Decimal("2.5"), Decimal(5)],
            timeout=20,
            message="both deposits reached the handler",
        )
        wait_until(lambda: any(w != str(wallet) for w, _ in ledger.deposits), timeout=20, message="a top-up")
    assert not runtime.started and not runtime.job_registry.scheduler.is_started
    assert scheduled_rows(app_db.url) == [
        ("ekbatan-event-fanout", False),
        ("ekbatan-event-handling", False),
        ("ekbatan-history-prune", False),  # execution history is on through the integrations
        ("wallet-top-up", False),
    ]


def test_no_job_and_no_handler_means_no_registry_and_the_app_still_works(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    config = application_yml(tmp_path, url, jobs_pool=False)

    @asynccontextmanager
    async def tables(app: FastAPI):
        Base.metadata.create_all(app.state.ekbatan.database_registry.primary().engine)
        yield {"greeting": "hello"}

    app = wallet_app(
        ekbatan_lifespan(config, ["integrations_sample.domain"], migrate_on_start=True, lifespan=tables)
    )

    @app.get("/greeting")
    async def greeting(request: Request) -> dict[str, Any]:
        # the application's lifespan state and Ekbatan's, merged
        return {"greeting": request.state.greeting, "ekbatan": request.state.ekbatan.started}

    app.include_router(health_router())
    with TestClient(app) as client:
        runtime = app.state.ekbatan
        assert runtime.job_registry is None and runtime.jobs == ()
        reply = client.post("/deposits", json={"wallet_id": str(uuid.uuid4()), "amount": "3"})
        assert Decimal(reply.json()["balance"]) == 3
        assert client.get("/runtime").json() == {"started": True, "jobs": []}
        assert client.get("/greeting").json() == {"greeting": "hello", "ekbatan": True}
        health = client.get("/health/ekbatan")
        assert (health.status_code, health.json()) == (200, {"status": "ok", "scheduler": None})
    assert not runtime.started


def test_a_bad_config_fails_startup_naming_the_key(tmp_path):
    config = application_yml(
        tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", extra={"jobs": {"polling-interval": "soon"}}
    )
    app = wallet_app(ekbatan_lifespan(config, ["integrations_sample"]))  # reads nothing yet
    with pytest.raises(SettingsError) as raised, TestClient(app):
        pass
    assert "ekbatan.jobs.polling-interval" in str(raised.value)
    assert not hasattr(app.state, "ekbatan")


def test_a_failed_start_leaves_no_scheduler_running(tmp_path):
    # no migrations: the jobs' rows cannot be written, so the registry's start-up check fails
    # after its scheduler has started polling
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    app = wallet_app(ekbatan_lifespan(config, ["integrations_sample.jobs"]))
    before = ekbatan_threads()
    with pytest.raises(JobRegistryError, match="could not verify the registration"), TestClient(app):
        pass
    assert not hasattr(app.state, "ekbatan")
    wait_until(lambda: ekbatan_threads() <= before, timeout=10, message="Ekbatan's threads to end")


def test_a_failing_user_lifespan_stops_ekbatan(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    seen: list[Any] = []

    @asynccontextmanager
    async def broken(app: FastAPI):
        seen.append(app.state.ekbatan)
        raise RuntimeError("the application's own start-up failed")
        yield

    app = wallet_app(
        ekbatan_lifespan(config, ["integrations_sample.jobs"], migrate_on_start=True, lifespan=broken)
    )
    before = ekbatan_threads()
    with pytest.raises(RuntimeError, match="own start-up failed"), TestClient(app):
        pass
    [runtime] = seen
    assert not runtime.started and not runtime.job_registry.scheduler.is_started
    wait_until(lambda: ekbatan_threads() <= before, timeout=10, message="Ekbatan's threads to end")
    assert scheduled_rows(f"sqlite:///{tmp_path / 'app.sqlite'}") == [
        ("ekbatan-history-prune", False),
        ("wallet-top-up", False),
    ]


def test_lifespans_compose_both_ways(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    calls: list[tuple[str, str, bool]] = []

    def app_lifespan(label: str):
        @asynccontextmanager
        async def lifespan(app: FastAPI):
            calls.append((label, "start", app.state.ekbatan.started))
            yield {"label": label}
            calls.append((label, "stop", app.state.ekbatan.started))

        return lifespan

    # 1. Ekbatan's lifespan wraps the application's
    wrapped = FastAPI(lifespan=ekbatan_lifespan(config, [], lifespan=app_lifespan("wrapped")))
    # 2. the application's lifespan enters Ekbatan's
    ekbatan = ekbatan_lifespan(config, [])

    @asynccontextmanager
    async def outer(app: FastAPI):
        async with ekbatan(app) as state, app_lifespan("nested")(app) as own:
            yield {**state, **own}

    nested = FastAPI(lifespan=outer)
    for app in (wrapped, nested):
        app.add_api_route("/state", _state_endpoint)
        with TestClient(app) as client:
            assert client.get("/state").json() == {
                "label": "wrapped" if app is wrapped else "nested",
                "ekbatan": True,
            }
        assert not app.state.ekbatan.started
    # the application's part runs while Ekbatan is started, on the way in and on the way out
    assert calls == [
        ("wrapped", "start", True),
        ("wrapped", "stop", True),
        ("nested", "start", True),
        ("nested", "stop", True),
    ]


async def _state_endpoint(
    request: Request, runtime: EkbatanRuntimeDep, executor: ActionExecutorDep
) -> dict[str, Any]:
    return {"label": request.state.label, "ekbatan": runtime.started and executor is runtime.action_executor}


# --------------------------------------------------------------------------- the event loop stays free
class WaitParams(BaseModel):
    timeout: float


class WaitForRelease(Action[WaitParams, bool]):
    """An action that holds its transaction until another request releases it."""

    def __init__(self) -> None:
        self.entered, self.released = threading.Event(), threading.Event()

    def perform(self, principal: Any, params: WaitParams) -> bool:
        self.entered.set()
        return self.released.wait(params.timeout)


def test_an_async_endpoint_running_a_slow_action_does_not_block_the_event_loop(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}", jobs_pool=False)
    waiting = WaitForRelease()
    app = FastAPI(lifespan=ekbatan_lifespan(config, [], migrate_on_start=True))

    @app.post("/wait")
    async def wait(executor: ActionExecutorDep) -> dict[str, bool]:
        return {"released": await run_action(executor, waiting, WaitParams(timeout=20))}

    @app.post("/wait-blocking")
    async def wait_blocking(executor: ActionExecutorDep) -> dict[str, bool]:
        # what run_action avoids: the synchronous call holds the event loop until it returns
        return {"released": executor.execute(waiting, WaitParams(timeout=1))}

    @app.post("/release")
    async def release() -> dict[str, bool]:
        waiting.released.set()
        return {"ok": True}

    def race(path: str) -> dict[str, bool]:
        waiting.entered.clear()
        waiting.released.clear()
        replies: list[Any] = []
        first = threading.Thread(target=lambda: replies.append(client.post(path).json()))
        first.start()
        try:
            assert waiting.entered.wait(10), "the slow action did not start"
            assert client.post("/release").json() == {"ok": True}
        finally:
            first.join(30)
        assert not first.is_alive()
        return replies[0]

    with TestClient(app) as client:
        assert race("/wait") == {"released": True}
        # the control: a blocking call keeps /release from running until the action gave up
        assert race("/wait-blocking") == {"released": False}


# --------------------------------------------------------------------------- readiness
class FailingJob(DistributedJob):
    def name(self) -> str:
        return "always-fails"

    def schedule(self) -> Any:
        return Schedules.fixed_delay(timedelta(hours=1))

    def execute(self, ctx: JobContext) -> None:
        raise RuntimeError("this job always fails")


def test_the_health_endpoint_reports_readiness(tmp_path):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    app = FastAPI(
        lifespan=ekbatan_lifespan(
            config, ["integrations_sample.jobs"], migrate_on_start=True, extra_jobs=[FailingJob()]
        )
    )
    app.include_router(health_router(failing_tasks_cache=timedelta(milliseconds=100)))
    app.include_router(health_router("/strict", max_poll_age=timedelta(seconds=1), max_failing_tasks=0))
    app.include_router(health_router("/no-db", count_failing_tasks=False))
    app.include_router(health_router("/fresh", max_poll_age=timedelta(seconds=1), count_failing_tasks=False))
    with TestClient(app) as client:
        scheduler = app.state.ekbatan.job_registry.scheduler
        wait_until(lambda: client.get("/health/ekbatan").status_code == 200, 10, message="ready")
        report = wait_until(
            lambda: (r := client.get("/health/ekbatan").json())["scheduler"]["failing_tasks"] == 1 and r,
            10,
            message="the failing job counted",
        )
        assert report["status"] == "ok"
        body = report["scheduler"]
        assert set(body) == {
            "running",
            "paused",
            "last_successful_poll_age_seconds",
            "max_poll_age_seconds",
            "executions_running",
            "failing_tasks",
            "dead_executions",
            "paused_tasks",
            "history_rows_dropped",
        }
        assert body["running"] is True and body["paused"] is False
        assert body["dead_executions"] == 0 and body["paused_tasks"] == []
        assert body["history_rows_dropped"] == 0  # execution history is on through the integrations
        # how recent: what status "ok" says (the age is within max_poll_age_seconds)
        assert isinstance(body["last_successful_poll_age_seconds"], float)
        assert body["last_successful_poll_age_seconds"] >= 0
        assert body["max_poll_age_seconds"] == 10.0  # 3 × 0.1 s polling, at least 10 s
        assert isinstance(body["executions_running"], int)
        # a failing task fails only the probe that says so
        strict = client.get("/strict")
        assert strict.status_code == 503
        assert strict.json()["reason"] == "1 failing task(s), more than 0"
        assert client.get("/no-db").json()["scheduler"]["failing_tasks"] is None
        # no task data and no configuration in any answer
        text = client.get("/health/ekbatan").text
        assert "sqlite" not in text and "always-fails" not in text and "wallet" not in text
        # a poller that stops polling makes the instance not ready
        scheduler.pause()
        stale = wait_until(
            lambda: (r := client.get("/fresh")).status_code == 503 and r.json(), 10, message="a stale poll"
        )
        assert stale["status"] == "unavailable"
        assert stale["reason"] == "the scheduler's last successful poll is too old"
        assert stale["scheduler"]["paused"] is True
        assert client.get("/no-db").status_code == 200  # within the default 10 s
        scheduler.resume()
        wait_until(lambda: client.get("/fresh").status_code == 200, 10, message="ready again")


def test_a_hammered_health_endpoint_reads_scheduled_tasks_once_per_cache_interval(tmp_path, monkeypatch):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    app = FastAPI(
        lifespan=ekbatan_lifespan(
            config, ["integrations_sample.jobs"], migrate_on_start=True, extra_jobs=[FailingJob()]
        )
    )
    app.include_router(health_router(failing_tasks_cache=timedelta(minutes=10)))
    with TestClient(app) as client:
        runtime = app.state.ekbatan
        repository = runtime.scheduler_client._repository
        reads = []
        real = repository.summary_by_task

        def counted(*args, **kwargs):
            reads.append(threading.current_thread().name)
            return real(*args, **kwargs)

        monkeypatch.setattr(repository, "summary_by_task", counted)
        wait_until(lambda: client.get("/health/ekbatan").status_code == 200, 10, message="ready")
        assert len(reads) == 1
        for _ in range(50):
            assert client.get("/health/ekbatan").json()["scheduler"]["failing_tasks"] is not None
        # concurrent callers: still no further read while the count is fresh
        threads = [threading.Thread(target=health_report, args=(runtime,)) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(reads) == 1, reads
        # once older than the interval asked for, the next report reads it again, and only once
        wait_until(
            lambda: (
                health_report(runtime, failing_tasks_cache=timedelta(0))[1]["scheduler"]["failing_tasks"] == 1
            ),
            10,
            message="the failing job counted on a fresh read",
        )
        assert len(reads) >= 2
        before = len(reads)
        assert health_report(runtime)[1]["scheduler"]["failing_tasks"] == 1  # the default 5 s: cached
        assert len(reads) == before


def test_while_one_probe_reads_the_failing_count_the_others_answer_with_the_one_read_before(
    tmp_path, monkeypatch
):
    config = application_yml(tmp_path, sqlite_with_wallets(tmp_path))
    app = FastAPI(
        lifespan=ekbatan_lifespan(
            config, ["integrations_sample.jobs"], migrate_on_start=True, extra_jobs=[FailingJob()]
        )
    )
    uncached = timedelta(0)

    def failing_tasks(runtime: Any) -> Any:
        return health_report(runtime, failing_tasks_cache=uncached)[1]["scheduler"]["failing_tasks"]

    with TestClient(app):
        runtime = app.state.ekbatan
        wait_until(lambda: failing_tasks(runtime) == 1, 10, message="the failing job counted")
        repository = runtime.scheduler_client._repository
        real = repository.summary_by_task
        reading, release = threading.Event(), threading.Event()

        def slow(*args, **kwargs):  # a database answering slowly, as during an outage
            reading.set()
            release.wait(30)
            return real(*args, **kwargs)

        monkeypatch.setattr(repository, "summary_by_task", slow)
        reader = threading.Thread(target=failing_tasks, args=(runtime,))
        reader.start()
        try:
            assert reading.wait(10)
            assert [failing_tasks(runtime) for _ in range(5)] == [1] * 5
            assert reader.is_alive(), "the other probes waited for the slow read"
        finally:
            release.set()
            reader.join(30)


def test_every_public_name_resolves_once():
    import ekbatan.integrations.fastapi as module

    assert len(module.__all__) == len(set(module.__all__))
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


def test_the_lifespan_takes_options_and_customize_scheduler(tmp_path):
    config = application_yml(tmp_path, f"sqlite:///{tmp_path / 'app.sqlite'}")
    beacon = Beacon()
    customized: list[Any] = []

    def noted_three_threads(builder: Any) -> Any:
        customized.append(builder)
        return three_threads(builder)

    # an options object for most of it, keywords over it; config by keyword too
    base = EkbatanOptions(config="nowhere.yml", extra_jobs=[beacon], migrate_on_start=True)
    lifespan = ekbatan_lifespan(config=config, options=base, customize_scheduler=noted_three_threads)
    assert not customized  # nothing is built before the application starts
    app = FastAPI(lifespan=lifespan)
    with TestClient(app):
        runtime = app.state.ekbatan
        assert runtime.options.extra_jobs == (beacon,) and runtime.options.config != "nowhere.yml"
        assert len(customized) == 1 and runtime.job_registry.scheduler.threads == 3
        wait_until(lambda: beacon.runs, timeout=20, message="the extra job ran")
    assert not runtime.started


def test_the_lifespan_refuses_an_option_given_twice_or_unknown():
    with pytest.raises(TypeError, match="got config both by position and by keyword"):
        ekbatan_lifespan("a.yml", config="b.yml")
    with pytest.raises(TypeError, match=r"unknown Ekbatan option\(s\) \['customise_scheduler'\]"):
        ekbatan_lifespan("a.yml", customise_scheduler=print)  # type: ignore[call-arg]
