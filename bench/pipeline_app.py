"""The application side of the pipeline benchmarks: the domain (a table, an event, an action and
three trivial handlers), a scratch database migrated for it, the process that runs the pipeline
jobs in a ``JobRegistry``, the writer process, and the probe that counts their rows."""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager
from typing import Any

from bench.common import scratch_database
from bench.crew import terminate
from bench.numbered_threads import run_numbered

HANDLERS = ("bench-audit", "bench-index", "bench-mail")
WRITER_THREADS = 4
NAMESPACE = "bench.pipeline"


# ----------------------------------------------------------------------------- the domain
def domain() -> dict[str, Any]:
    """The table, event, action and handlers, defined on first use (in every process)."""
    global _DOMAIN
    if _DOMAIN:
        return _DOMAIN
    import sqlalchemy as sa
    from sqlalchemy.orm import DeclarativeBase

    from ekbatan.core import Action, ModelEvent, ShardedUUID, ShardIdentifier
    from ekbatan.local_event_handler import EventHandler

    class Base(DeclarativeBase):
        pass

    class BenchItem(Base):
        __tablename__ = "bench_items"
        id = sa.Column(sa.Uuid, primary_key=True)
        seq = sa.Column(sa.Integer, nullable=False)
        label = sa.Column(sa.String(20), nullable=False)

    class BenchItemRecorded(ModelEvent):
        seq: int
        label: str

    shard = ShardIdentifier(0, 0)

    class RecordItem(Action[dict, uuid.UUID]):
        def perform(self, principal: Any, params: dict) -> uuid.UUID:
            item = BenchItem(id=ShardedUUID.generate(shard), seq=params["seq"], label="bench")
            self.plan.add(item, BenchItemRecorded(seq=params["seq"], label="bench"))
            return item.id

    class TrivialHandler(EventHandler[Any]):
        def __init__(self, name: str, samples: list[tuple[int, str, float]] | None) -> None:
            self._name = name
            self._samples = samples

        def name(self) -> str:
            return self._name

        def event_type(self) -> type:
            return BenchItemRecorded

        def handle(self, envelope: Any) -> None:
            if self._samples is not None:
                self._samples.append((envelope.event.seq, self._name, time.time()))

    _DOMAIN.update(Base=Base, shard=shard, RecordItem=RecordItem, TrivialHandler=TrivialHandler)
    return _DOMAIN


_DOMAIN: dict[str, Any] = {}


def app_registry(url: str, eventlog: str, pool: int) -> Any:
    from ekbatan.core import ConnectionProvider, DatabaseRegistry, TransactionManager

    shard = domain()["shard"]
    provider = ConnectionProvider.from_url(url, maximum_pool_size=pool)
    manager = TransactionManager(provider, shard=shard, eventlog_schema=eventlog)
    with provider.engine.connect():
        pass
    return DatabaseRegistry([manager], default_shard=shard)


def executor_for(registry: Any) -> Any:
    from ekbatan.core import ActionExecutor

    return ActionExecutor(registry, namespace=NAMESPACE)


# ----------------------------------------------------------------------------- databases
@contextmanager
def pipeline_database(dialect: str) -> Any:
    """A scratch database migrated with every contribution, plus ``bench_items``; its eventlog
    under a name of its own (on MariaDB a database, dropped afterwards)."""
    import sqlalchemy as sa

    from ekbatan.core import migrate
    from ekbatan.core.migrations import MigrationTarget

    eventlog = f"bench_el_{uuid.uuid4().hex[:10]}"
    with scratch_database(dialect) as db:
        try:
            migrate([MigrationTarget("0/0", db.url, eventlog)])
            engine = sa.create_engine(db.url, poolclass=sa.NullPool)
            domain()["Base"].metadata.create_all(engine)
            engine.dispose()
            yield db.url, eventlog
        finally:
            if dialect == "mariadb":
                from testsupport import server_url

                admin = sa.create_engine(
                    server_url("mariadb"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
                )
                with admin.connect() as c:
                    c.exec_driver_sql(f"DROP DATABASE IF EXISTS {eventlog}")
                admin.dispose()


class Probe:
    """The harness's view of the pipeline's tables: counts on one open connection."""

    def __init__(self, url: str, eventlog: str) -> None:
        import sqlalchemy as sa

        from ekbatan.core import eventlog_tables
        from ekbatan.core.persistence import DialectName
        from ekbatan.local_event_handler import notifications_table

        self._sa = sa
        self._engine = sa.create_engine(url, poolclass=sa.NullPool)
        dialect = {"postgresql": "postgresql", "mariadb": "mariadb", "sqlite": "sqlite"}[
            self._engine.dialect.name
        ]
        self._events = eventlog_tables(DialectName(dialect), eventlog).events
        self._notes = notifications_table(DialectName(dialect), eventlog)
        self._conn = self._engine.connect()

    def counts(self) -> dict[str, int]:
        sa, e, n = self._sa, self._events, self._notes
        rows = self._conn.execute(sa.select(n.c.state, sa.func.count()).group_by(n.c.state)).all()
        events = self._conn.execute(
            sa.select(e.c.delivered, sa.func.count())
            .where(e.c.event_type.is_not(None))
            .group_by(e.c.delivered)
        ).all()
        self._conn.commit()  # a fresh snapshot next time (MariaDB's REPEATABLE READ)
        by_state = {str(s): int(c) for s, c in rows}
        by_delivered = {bool(d): int(c) for d, c in events}
        return {
            "events": sum(by_delivered.values()),
            "undelivered": by_delivered.get(False, 0),
            "succeeded": by_state.get("SUCCEEDED", 0),
            "open": by_state.get("PENDING", 0) + by_state.get("FAILED", 0),
            "failed": by_state.get("FAILED", 0),
            "expired": by_state.get("EXPIRED", 0),
        }

    def jobs_running(self) -> int:
        """How many pipeline jobs' rows are picked (a pipeline job holds its row while it runs)."""
        sa = self._sa
        n = self._conn.execute(
            sa.text(
                "SELECT count(*) FROM scheduled_tasks WHERE picked = :p AND task_name LIKE 'ekbatan-event-%'"
            ),
            {"p": True},
        ).scalar_one()
        self._conn.commit()
        return int(n)

    def close(self) -> None:
        self._conn.close()
        self._engine.dispose()


def backlog(c: dict[str, int]) -> int:
    """Deliveries still to do: 3 per undelivered event, plus every open notification."""
    return len(HANDLERS) * c["undelivered"] + c["open"]


# ----------------------------------------------------------------------------- processes
class _JobFailures(logging.Handler):
    """The ERROR lines of the job wrapper ("job X failed: ..."): a failed run ends the job's
    loop until its next scheduled run, which the figures must not hide."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().splitlines()[0][:300])


def pipeline_worker(pipe: Any, go: Any, stop: Any, url: str, eventlog: str, opts: dict[str, Any]) -> None:
    """One application instance running the pipeline jobs in a ``JobRegistry``."""
    try:
        from datetime import timedelta

        from ekbatan.core import ConnectionProvider
        from ekbatan.core.config import LocalEventHandlerConfig
        from ekbatan.core.outbox import UtcClock
        from ekbatan.distributed_jobs import JobRegistry
        from ekbatan.local_event_handler import (
            EventFanoutJob,
            EventHandlerRegistry,
            EventHandlingJob,
            event_pipeline_jobs,
        )

        parts = domain()
        samples: list[tuple[int, str, float]] | None = [] if opts.get("record") else None
        handlers = (
            EventHandlerRegistry.builder()
            .with_handlers([parts["TrivialHandler"](name, samples) for name in HANDLERS])
            .build()
        )
        registry = app_registry(url, eventlog, 10)
        if opts.get("wakeups", True):
            # default settings, but handling.enabled (false by default: no node runs handlers
            # unless it opts in)
            config = LocalEventHandlerConfig.model_validate({"handling": {"enabled": True}})
            jobs = event_pipeline_jobs(config, database_registry=registry, event_handler_registry=handlers)
        else:
            # the same two jobs as event_pipeline_jobs builds, without LISTEN wake-ups
            handling = (
                EventHandlingJob.builder()
                .database_registry(registry)
                .event_handler_registry(handlers)
                .clock(UtcClock())
                .wakeups(False)
                .build()
            )
            fanout = (
                EventFanoutJob.builder()
                .database_registry(registry)
                .event_handler_registry(handlers)
                .clock(UtcClock())
                .wakeups(False)
                .wake_after_fanout(handling)
                .build()
            )
            jobs = [fanout, handling]
        jobs_pool = ConnectionProvider.from_url(url, maximum_pool_size=2)
        with jobs_pool.engine.connect():
            pass
        job_registry = (
            JobRegistry.builder()
            .connection_provider(jobs_pool)
            .with_jobs(jobs)
            .register_shutdown_hook(False)
            .shutdown_max_wait(timedelta(seconds=10))
            .build()
        )
    except BaseException as exc:
        pipe.send({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
        raise
    failures = _JobFailures()
    logging.getLogger("ekbatan.distributed_jobs").addHandler(failures)
    pipe.send({"event": "ready"})
    go.wait()
    started = time.time()
    error = None
    try:
        job_registry.start()
        stop.wait()
    except BaseException as exc:  # reported, the harness decides
        error = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            job_registry.stop()
        finally:
            jobs_pool.close()
            for manager in registry.transaction_managers():
                manager.close()
    pipe.send(
        {
            "started": started,
            "samples": samples or [],
            "fanned_out": jobs[0].fanned_out,
            "job_failures": failures.messages,
            "error": error,
        }
    )


def writer_worker(pipe: Any, go: Any, stop: Any, url: str, eventlog: str, opts: dict[str, Any]) -> None:
    """``threads`` threads executing the one-event action: ``count`` actions in all, or until
    ``stop`` (or ``seconds``)."""
    registry = app_registry(url, eventlog, int(opts.get("threads", WRITER_THREADS)) + 2)
    executor = executor_for(registry)
    action = domain()["RecordItem"]()
    executor.execute(action, {"seq": -1})  # warm: compile the statements, open the connections
    threads = int(opts.get("threads", WRITER_THREADS))
    seconds = opts.get("seconds")
    pipe.send({"event": "ready"})
    go.wait()
    deadline = time.perf_counter() + seconds if seconds else None

    def keep_going() -> bool:
        return not stop.is_set() and (deadline is None or time.perf_counter() < deadline)

    def one(seq: int) -> None:
        executor.execute(action, {"seq": seq})

    done, elapsed, errors = run_numbered([one] * threads, opts.get("count"), keep_going)
    for manager in registry.transaction_managers():
        manager.close()
    pipe.send({"actions": done, "seconds": elapsed, "errors": errors})


def report_of(crew: Any, timeout: float) -> dict[str, Any]:
    """The one report of a crew whose worker ends by itself (the writers), then its process."""
    pipe = crew.pipes[0]
    report = pipe.recv() if pipe.poll(timeout) else {"error": f"no report within {timeout:.0f} s"}
    crew.stop.set()
    terminate(crew.processes)
    return report


def wait_for_counts(
    probe: Probe, done: Any, timeout: float, every: float = 0.2, stall: float = 60.0
) -> tuple[float, dict]:
    """Poll until ``done(counts)``; returns (perf_counter when seen, counts). Gives up at
    ``timeout`` or when nothing moved for ``stall`` seconds."""
    deadline = time.perf_counter() + timeout
    last, last_change = None, time.perf_counter()
    while True:
        c = probe.counts()
        now = time.perf_counter()
        if done(c) or now > deadline:
            return now, c
        key = (c["succeeded"], c["undelivered"], c["open"])
        if key != last:
            last, last_change = key, now
        elif now - last_change > stall:
            return now, c
        time.sleep(every)
