"""``JobRegistry``: Ekbatan's facade over the scheduler engine.

Each :class:`DistributedJob` becomes one recurring task whose single row in
``scheduled_tasks`` coordinates the cluster. Engine tasks given with ``with_tasks`` (one-time
tasks, persistent-schedule tasks…) run in the same scheduler, on threads of their own. Defaults differ from the engine's where Ekbatan's
do: heartbeat every 10 s (× 6 missed = 60 s until another instance revives a stalled run),
one worker thread per job, the dialect pinned from the pool's URL without connecting.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, NoReturn, Protocol, runtime_checkable

import sqlalchemy as sa

from ekbatan.distributed_jobs._job_tasks import (
    TaskFailureLog,
    job_handler,
    job_misfire_policy,
    name_clash,
    qualified,
    refuse_task_name_clashes,
)
from ekbatan.distributed_jobs.job import DistributedJob
from ekbatan.distributed_jobs.scheduler import (
    MIN_MISSED_HEARTBEATS,
    HistoryRetention,
    MisfirePolicy,
    RecurringTask,
    ScheduledExecutionsFilter,
    Scheduler,
    SchedulerBuilder,
    Task,
    Tasks,
    describe_failure,
    require_opentelemetry_api,
)
from ekbatan.distributed_jobs.stop_signals import StopSignals

log = logging.getLogger("ekbatan.distributed_jobs")

DEFAULT_HEARTBEAT_INTERVAL = timedelta(seconds=10)
#: threads shared by the tasks given with ``with_tasks``, beside the one each job has
DEFAULT_TASK_THREADS = 4


@runtime_checkable
class EngineProvider(Protocol):
    """Anything with an SQLAlchemy ``engine`` — e.g. ``ekbatan.core.persistence.ConnectionProvider``."""

    @property
    def engine(self) -> sa.Engine: ...


@runtime_checkable
class DescribedEngineProvider(EngineProvider, Protocol):
    """An :class:`EngineProvider` that also says which pool it is (``ConnectionProvider`` does):
    the registry names it in its messages and takes the dialect from it."""

    @property
    def dialect(self) -> object: ...

    @property
    def name(self) -> str | None: ...

    @property
    def config_path(self) -> str | None: ...


class JobRegistryError(RuntimeError):
    """The registry could not be built or started as configured."""


class JobsDatabaseUnavailableError(JobRegistryError):
    """``start()`` could not connect to the jobs pool's database (the message names the pool)."""


def _pool_label(provider: sa.Engine | EngineProvider) -> str:
    """``the jobs pool <config path> (<name>) at <url, password masked>``."""
    engine, _ = _engine_of(provider)
    path, name = (
        (provider.config_path, provider.name)
        if isinstance(provider, DescribedEngineProvider)
        else (None, None)
    )
    where = f"{path} ({name})" if path and name else path or (f"{name!r}" if name else "")
    url = engine.url
    if url.password == "":
        # an empty password (``${PG_PASSWORD:}``) is left out: ``user:***@`` would suggest one is set
        url = url._replace(password=None)
    return f"the jobs pool{' ' + where if where else ''} at {url.render_as_string(hide_password=True)}"


def _engine_of(provider: sa.Engine | EngineProvider) -> tuple[sa.Engine, str | None]:
    if isinstance(provider, sa.Engine):
        return provider, None
    if isinstance(provider, DescribedEngineProvider):
        return provider.engine, (str(provider.dialect) if provider.dialect is not None else None)
    if isinstance(provider, EngineProvider):
        return provider.engine, None
    raise TypeError(
        f"connection_provider must be a ConnectionProvider or an SQLAlchemy Engine, got {type(provider).__name__}"
    )


class JobRegistryBuilder:
    def __init__(self) -> None:
        self._provider: sa.Engine | EngineProvider | None = None
        self._jobs: list[DistributedJob] = []
        self._tasks: list[Task[Any]] = []
        self._task_threads = DEFAULT_TASK_THREADS
        self._poll_interval: timedelta | None = None
        self._heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self._missed_heartbeats_limit: int | None = None
        self._shutdown_max_wait: timedelta | None = None
        self._shutdown_hook = True
        self._require_database = True
        self._customizers: list[Callable[[SchedulerBuilder], Any]] = []
        self._history: HistoryRetention | None = None
        self._telemetry: tuple[bool, dict[str, Any]] = (False, {})
        self._keep_task_data = False
        self._misfire: MisfirePolicy | None = None

    def connection_provider(self, provider: sa.Engine | EngineProvider) -> JobRegistryBuilder:
        """A dedicated, small pool for the scheduler (it polls continuously). You own its lifecycle."""
        self._provider = provider
        return self

    def with_job(self, job: DistributedJob) -> JobRegistryBuilder:
        if job is None:
            raise ValueError("job cannot be None")
        self._jobs.append(job)
        return self

    def with_jobs(self, jobs: Iterable[DistributedJob]) -> JobRegistryBuilder:
        if jobs is None:
            raise ValueError("jobs cannot be None")
        jobs = list(jobs)
        if any(job is None for job in jobs):
            raise ValueError(f"jobs contains a None job: {jobs!r}")
        self._jobs.extend(jobs)
        return self

    def misfire_policy(self, policy: MisfirePolicy | str) -> JobRegistryBuilder:
        """The misfire policy of every job that names none itself (``misfire_policy()`` on the
        job); unset: ``run_once``, db-scheduler's behaviour."""
        self._misfire = policy if isinstance(policy, MisfirePolicy) else MisfirePolicy.parse(policy)
        return self

    def with_tasks(self, tasks: Iterable[Task[Any]]) -> JobRegistryBuilder:
        """Engine tasks to run in the same scheduler: one-time tasks, persistent-schedule tasks
        (``@one_time_task``, ``Tasks.one_time(...).execute(fn)``…). Their names share the
        table with the jobs', so a task and a job of one name are refused when building. The
        scheduler knows their data types, so ``registry.scheduler`` decodes their data."""
        if tasks is None:
            raise ValueError("tasks cannot be None")
        tasks = list(tasks)
        for task in tasks:
            if not isinstance(task, Task):
                raise TypeError(
                    f"with_tasks takes engine tasks (Tasks.one_time(...).execute(fn), @one_time_task on a "
                    f"function), got {task!r}"
                )
        self._tasks.extend(tasks)
        return self

    def task_threads(self, n: int) -> JobRegistryBuilder:
        """Threads for the tasks' executions, beside the one each job has (default 4). A job
        holds its thread while it runs, so the tasks get these whatever the jobs do."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"task_threads must be an int of at least 1, got {n!r}")
        self._task_threads = n
        return self

    def poll_interval(self, interval: timedelta) -> JobRegistryBuilder:
        self._poll_interval = interval
        return self

    def heartbeat_interval(self, interval: timedelta) -> JobRegistryBuilder:
        self._heartbeat_interval = interval
        return self

    def missed_heartbeats_limit(self, limit: int) -> JobRegistryBuilder:
        """How many heartbeats a running job may miss before another instance revives it: the dead
        window is ``heartbeat_interval × limit`` (default 6, 60 s). At least 4."""
        self._missed_heartbeats_limit = limit
        return self

    def shutdown_max_wait(self, wait: timedelta) -> JobRegistryBuilder:
        """Applied to each of the two shutdown phases, so stopping can take up to twice this."""
        self._shutdown_max_wait = wait
        return self

    def apply_settings(self, *_: object) -> NoReturn:
        """Gone: the builder takes plain values; settings map onto them from the integrations."""
        raise AttributeError(
            "JobRegistryBuilder.apply_settings was removed: the builder takes plain values only; write "
            "ekbatan.integrations.apply_jobs_settings(builder, settings.jobs) for the ekbatan.jobs keys"
        )

    def register_shutdown_hook(self, enabled: bool) -> JobRegistryBuilder:
        """Stop at interpreter exit (``atexit``; default on). Integrations pass False and stop
        the registry from their own lifecycle. No signal handler is ever installed."""
        self._shutdown_hook = enabled
        return self

    def require_database(self, required: bool) -> JobRegistryBuilder:
        """Whether ``start()`` fails when the jobs database cannot be reached (default True).

        False starts degraded instead: the scheduler keeps retrying, backing off, registers the
        jobs and runs them once the database answers, and until then reports no successful poll
        (the health endpoints answer 503). ``start(require_database=...)`` overrides this.
        """
        self._require_database = required
        return self

    def execution_history(
        self, enabled: bool = True, *, retention: HistoryRetention | None = None, keep_task_data: bool = False
    ) -> JobRegistryBuilder:
        """Record every finished run in ``scheduled_tasks_history`` (see
        ``SchedulerBuilder.execution_history``); off unless called — the integrations call it,
        and ``ekbatan.jobs.history.enabled: false`` turns it off there."""
        self._history = (retention or HistoryRetention()) if enabled else None
        self._keep_task_data = keep_task_data
        return self

    def telemetry(self, enabled: bool = True, **options: Any) -> JobRegistryBuilder:
        """OpenTelemetry metrics and traces of the scheduler; ``options`` are those of
        ``SchedulerBuilder.telemetry`` (``meter_provider``, ``tracer_provider``, ``metrics``,
        ``traces``, ``database_gauges``, ``gauge_interval``, ``semantic_conventions``). Off
        unless called; the integrations call it from ``ekbatan.observability``."""
        self._telemetry = (enabled, options)
        if enabled:
            require_opentelemetry_api()  # refused here, naming what to install, rather than at build
        return self

    def customize_scheduler(self, customizer: Callable[[SchedulerBuilder], Any]) -> JobRegistryBuilder:
        """Adjust the engine's builder; applied last, so it can override anything
        (``delete_unresolved_after``, polling strategy, ``scheduler_name``, …)."""
        if customizer is None:
            raise ValueError("customizer cannot be None")
        self._customizers.append(customizer)
        return self

    def build(self) -> JobRegistry:
        if self._provider is None:
            raise ValueError(
                "connection_provider is required: pass a ConnectionProvider or an SQLAlchemy Engine"
            )
        if not self._jobs and not self._tasks:
            raise ValueError("at least one DistributedJob must be registered, or a task with with_tasks(...)")
        names: list[str] = []
        for job in self._jobs:
            name = job.name()
            if not isinstance(name, str) or not name.strip():
                raise ValueError(
                    f"{qualified(job)} returned a blank name() ({name!r}); a job name must be "
                    "non-blank and stable across restarts — it is the job's row key in scheduled_tasks"
                )
            names.append(name)
        refuse_task_name_clashes(self._jobs, names, self._tasks)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            clashes = "; ".join(
                name_clash(name, [job for job, n in zip(self._jobs, names, strict=True) if n == name])
                for name in duplicates
            )
            raise ValueError(
                f"DistributedJob names must be unique within a JobRegistry; {clashes}. Rename one of them: "
                "the name is the job's row key in scheduled_tasks"
            )
        tasks: list[RecurringTask[Any]] = []
        must_register: list[str] = []
        for job, name in zip(self._jobs, names, strict=True):
            schedule = job.schedule()
            if schedule is None:
                raise ValueError(f"DistributedJob {name!r} returned None from schedule(); return a Schedule")
            if not schedule.is_disabled:
                must_register.append(name)
            recurring = Tasks.recurring(name, schedule)
            policy = job_misfire_policy(job, name) or self._misfire
            if policy is not None:
                recurring.misfire(policy)
            tasks.append(recurring.execute(job_handler(job, name)))
        if self._poll_interval is not None and self._poll_interval <= timedelta(0):
            raise ValueError(
                f"poll_interval must be positive, got {self._poll_interval}; a zero or negative interval would "
                "poll in a tight loop"
            )
        if self._heartbeat_interval is None or self._heartbeat_interval <= timedelta(0):
            raise ValueError(f"heartbeat_interval must be positive, got {self._heartbeat_interval}")
        limit = self._missed_heartbeats_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < MIN_MISSED_HEARTBEATS
        ):
            raise ValueError(
                f"missed_heartbeats_limit must be an int of at least {MIN_MISSED_HEARTBEATS}, got {limit!r}: "
                "fewer would revive runs that are only slow to write a heartbeat"
            )
        if self._shutdown_max_wait is not None and self._shutdown_max_wait < timedelta(0):
            raise ValueError(f"shutdown_max_wait must be zero or positive, got {self._shutdown_max_wait}")

        engine, dialect = _engine_of(self._provider)
        # The same task object given twice is one task (discovered and passed again by hand).
        extra = list({id(task): task for task in self._tasks}.values())
        builder = (
            Scheduler.create(engine)
            # start_tasks for the given tasks too: a hand-built recurring or custom task
            # schedules itself at start-up (a one-time task's start-up does nothing)
            .start_tasks(*tasks, *extra)
            # A job occupies a worker for as long as it runs — the event pipeline jobs run
            # indefinitely — so every job gets a thread of its own and none can starve another;
            # the tasks share threads of their own on top.
            # (and the history's pruning task one more, when only jobs would run beside it)
            .threads(len(tasks) + (self._task_threads if extra else 1 if self._history else 0))
            .heartbeat_interval(self._heartbeat_interval)
            .register_shutdown_hook(self._shutdown_hook)
            # the job wrapper logs a failure once, at ERROR; the engine would log it again
            .failure_logging("OFF")
        )
        if extra:
            # with the engine's failure logging off, a failing task would otherwise be silent
            builder.add_listener(TaskFailureLog({task.name for task in extra}))
        # Pinned from the URL, never from a connection: building must not touch the database.
        # A bare Engine's URL is read by the engine's build(), after the customizers, so an
        # unknown scheme is refused unless a customizer names the dialect (b.dialect(...)).
        if dialect is not None:
            builder.dialect(dialect)
        if self._poll_interval is not None:
            builder.polling_interval(self._poll_interval)
        if self._shutdown_max_wait is not None:
            builder.shutdown_max_wait(self._shutdown_max_wait)
        if limit is not None:
            builder.missed_heartbeats_limit(limit)
        if self._history is not None:
            builder.execution_history(retention=self._history, keep_task_data=self._keep_task_data)
        if self._telemetry[0]:
            builder.telemetry(True, **self._telemetry[1])
        for customize in self._customizers:
            customize(builder)
        return JobRegistry(
            builder.build(),
            names,
            must_register,
            task_names=[task.name for task in extra],
            pool_label=_pool_label(self._provider),
            require_database=self._require_database,
        )


class JobRegistry:
    """Built by :meth:`builder`; ``start()`` / ``stop()``, or use it as a context manager."""

    @staticmethod
    def builder() -> JobRegistryBuilder:
        return JobRegistryBuilder()

    def __init__(
        self,
        scheduler: Scheduler,
        job_names: list[str],
        must_register: list[str],
        *,
        pool_label: str = "the jobs pool",
        require_database: bool = True,
        task_names: Iterable[str] = (),
    ) -> None:
        self.scheduler = scheduler
        self.job_names = tuple(job_names)
        #: the tasks given with ``with_tasks``, run in the same scheduler
        self.task_names = tuple(task_names)
        self._must_register = tuple(must_register)
        self._pool_label = pool_label
        self._require_database = require_database

    def start(self, *, require_database: bool | None = None) -> None:
        """Check that the jobs database answers, start the scheduler and check that every
        enabled job has its row.

        The check is one connection attempt with a short connect timeout, made before any
        thread starts. When it fails, ``start()`` raises :class:`JobsDatabaseUnavailableError`
        naming the pool (its config path, name and URL, password masked) and the driver's error
        — unless ``require_database`` is False (default: the builder's
        :meth:`~JobRegistryBuilder.require_database`, True), which starts degraded: a WARNING,
        then the scheduler retries on its own and registers and runs the jobs once the database
        answers.

        Raises :class:`JobRegistryError` naming the jobs without a row — typically because the
        ``scheduled_tasks`` table is missing or the jobs pool cannot write to it. A failed
        start leaves no thread running: after a failed connection check nothing was started
        (``start()`` may be called again); after a failed registration the scheduler is
        stopped again (build a new registry to try again).
        """
        required = self._require_database if require_database is None else require_database
        log.info("starting %d distributed job(s): %s", len(self.job_names), list(self.job_names))
        if self.task_names:
            log.info("with %d task(s): %s", len(self.task_names), list(self.task_names))
        try:
            self.scheduler.check_database()
        except Exception as exc:
            problem = f"cannot connect to {self._pool_label}: {describe_failure(exc)}"
            if required:
                # nothing has started, so start() may be called again once the database is up
                raise JobsDatabaseUnavailableError(
                    f"{problem}. Fix the pool's url, user or password, or start the database; "
                    "start(require_database=False) starts anyway and waits for it"
                ) from exc
            log.warning(
                "%s; starting without it: the scheduler retries, backing off, and the jobs are "
                "registered and run once the database answers",
                problem,
            )
            self.scheduler.start()
            return
        self.scheduler.start()
        try:
            self.verify_registration()
        except BaseException:
            self.scheduler.stop()
            raise

    @property
    def waiting_for_database(self) -> bool:
        """True while the scheduler has not polled successfully, or while jobs started without
        the database still wait for their rows; a degraded start reports this. A job whose row
        cannot be written for another reason is retried and logged, but is no outage."""
        scheduler = self.scheduler
        return scheduler.last_successful_poll is None or bool(scheduler.startup_tasks_waiting_for_database)

    def verify_registration(self) -> None:
        everything = ScheduledExecutionsFilter.all()
        missing = []
        try:
            for name in self._must_register:
                # picked rows count: a job that already fired must not look missing
                if not self.scheduler.get_scheduled_executions_for_task(name, filter=everything):
                    missing.append(name)
        except Exception as exc:
            raise JobRegistryError(
                f"could not verify the registration of distributed jobs {list(self._must_register)}: {exc}"
            ) from exc
        if missing:
            raise JobRegistryError(
                f"{len(missing)} of {len(self._must_register)} job(s) were not registered: {missing}. "
                f"Their rows could not be written to {self.scheduler.table_name!r}: check that the "
                "table exists (run the migrations before starting) and that the jobs pool may write to it."
            )

    def stop(self) -> None:
        if self.scheduler.is_shutting_down:
            return  # stopped already, or by a failed start()
        log.info("stopping distributed jobs")
        self.scheduler.stop()
        log.info("distributed jobs stopped")

    def run_until_signal(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> signal.Signals:
        """Run until one of ``signals`` arrives, then stop; for a plain script without an integration.

        Starts the registry unless it is started already, blocks the calling thread until a
        signal arrives, restores the previous handlers, stops the registry (running jobs get
        ``shutdown_max_wait`` twice, as with ``stop()``) and returns the signal received.
        Must be called from the main thread: only it may install signal handlers.
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "run_until_signal() must be called from the main thread: Python installs signal handlers "
                f"only there, and this is {threading.current_thread().name!r}. Call start() and stop() instead."
            )
        stop_signals = list(signals)
        if not stop_signals:
            raise ValueError("run_until_signal() needs at least one signal to wait for")
        try:
            with StopSignals(stop_signals) as stop:
                if not self.scheduler.is_started:
                    self.start()
                log.info("distributed jobs running until %s", ", ".join(sig.name for sig in stop.signals))
                received = stop.wait()
        finally:
            self.stop()  # after the handlers are restored: a second signal stops a long drain
        log.info("received %s", received.name)
        return received

    def __enter__(self) -> JobRegistry:
        self.start()  # a failed start() has stopped what it started
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        tasks = f", tasks={list(self.task_names)!r}" if self.task_names else ""
        return f"JobRegistry(jobs={list(self.job_names)!r}{tasks})"
