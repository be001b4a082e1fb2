"""Ekbatan as a Flask extension, ``Ekbatan(app)`` or ``ekbatan.init_app(app)``: each process
builds and starts its own graph on first use. The guide is docs/wiring/flask.md."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any, Unpack, cast

try:
    import click
    from flask import (
        Blueprint,
        Flask,
        Response,
        appcontext_pushed,
        current_app,
        has_app_context,
        jsonify,
        request,
    )
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ekbatan.integrations.flask needs Flask: pip install 'ekbatan-integrations[flask]'"
    ) from error
if TYPE_CHECKING:
    from werkzeug.local import LocalProxy

from ekbatan.core import ActionExecutor, DatabaseRegistry, EkbatanSettings
from ekbatan.core.sharding import resolve_jobs_config
from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.integrations.discovery import scan
from ekbatan.integrations.flask_cli import EXTENSION_KEY, ekbatan_cli
from ekbatan.integrations.flask_operator import check_mount_path, operator_view_blueprint
from ekbatan.integrations.health import FAILING_TASKS_CACHE, health_report
from ekbatan.integrations.metrics_exposition import METRICS_OFF, render_metrics
from ekbatan.integrations.options import EkbatanOptions, OptionFields, _flag
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime, load

__all__ = ["Ekbatan", "ekbatan_cli", "gunicorn_post_worker_init", "gunicorn_worker_exit"]

log = logging.getLogger("ekbatan.integrations.flask")


@dataclass
class _AppState:
    """One application's options (their settings loaded), and the graph built for it in
    process ``pid``. Read it through :meth:`here`."""

    settings: EkbatanSettings
    options: EkbatanOptions
    autostart: bool
    pid: int = field(default_factory=os.getpid)
    runtime: EkbatanRuntime | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    def here(self) -> _AppState:
        """This state, first made this process's own if ``fork()`` copied it from a parent: the
        parent's graph is set aside and this process builds its own on first use."""
        pid = os.getpid()
        if self.pid != pid:
            with _process_lock():
                if self.pid != pid:
                    if self.runtime is not None:
                        # Its pools hold the parent's connections: closing them here, or letting
                        # the collector close them, would end the parent's sessions.
                        _left_to_parent.append(self.runtime)
                        self.runtime = None
                    # the copied lock may be held by a thread of the parent, which is not here
                    self.lock = threading.RLock()
                    self.pid = pid  # last: a thread that sees this pid sees the new lock
        return self


class Ekbatan:
    """The Flask extension. One instance may serve several applications (app factories).

    What to build is an :class:`~ekbatan.integrations.options.EkbatanOptions`, read from each
    application's ``app.config`` (``EKBATAN_OPTIONS``, then ``EKBATAN_<FIELD>`` keys such as
    ``EKBATAN_CONFIG``, ``EKBATAN_PACKAGES``, ``EKBATAN_EXTRA_JOBS``); what is given here —
    ``options=`` and the same fields as keywords (``config``, ``packages``, ``container``,
    ``migrate_on_start``, ``require_database``, ``clock``, ``codec``, ``extra_jobs``,
    ``extra_handlers``, ``extra_tasks``, ``customize_scheduler``) — wins over it: a keyword
    whenever it is given (not None), and ``options`` for every field it sets to other than
    the default.

    ``EKBATAN_AUTOSTART`` and ``EKBATAN_START_FOR_CLI`` (when to start) are the extension's own.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        config: str | os.PathLike[str] | EkbatanSettings | None = None,
        packages: Iterable[str | ModuleType] | str | ModuleType | None = None,
        options: EkbatanOptions | None = None,
        **fields: Unpack[OptionFields],
    ) -> None:
        # Checked now, so that a mistake (an unknown keyword, a wrong type) is raised here;
        # merged with each application's app.config in init_app.
        self._options = EkbatanOptions.of(options)
        self._given: dict[str, Any] = {
            name: value
            for name, value in {"config": config, "packages": packages, **fields}.items()
            if value is not None
        }
        EkbatanOptions.of(self._options, **self._given)
        self._states: weakref.WeakKeyDictionary[Flask, _AppState] = weakref.WeakKeyDictionary()
        _extensions.add(self)
        if app is not None:
            self.init_app(app)

    # ------------------------------------------------------------------ wiring
    def init_app(self, app: Flask) -> None:
        """Read and check the settings, import the packages, add the CLI; open and start nothing.

        Raises what the settings loader raises (naming the bad key), what discovery raises
        (naming the module or class) and, when a job or handler exists but no ``jobs-config``
        is set, the error naming that key and its path.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(
                f"Ekbatan is already initialized on the application {app.name!r}; "
                "create one Ekbatan and call init_app once per application"
            )
        opts = self.options_for(app)
        settings = load(opts.config)
        discovered = scan(opts.packages)
        if (
            discovered.jobs
            or discovered.handlers
            or discovered.tasks
            or opts.extra_jobs
            or opts.extra_handlers
            or opts.extra_tasks
        ):
            resolve_jobs_config(settings.sharding, strict=True)
        state = _AppState(
            settings=settings,
            options=opts.replace(config=settings),  # each process builds from these, read once
            autostart=_flag("EKBATAN_AUTOSTART", app.config.get("EKBATAN_AUTOSTART", True)),
        )
        self._states[app] = state
        app.extensions[EXTENSION_KEY] = self
        app.cli.add_command(ekbatan_cli)
        if not state.autostart:
            return
        app.before_request(self._start_on_first_request)
        if _flag("EKBATAN_START_FOR_CLI", app.config.get("EKBATAN_START_FOR_CLI", False)):
            appcontext_pushed.connect(self._start_for_cli_command, app)
        if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
            # The reloader's child: it serves and forks no further; its parent never gets here
            # with the variable set, and it receives no request, so it never starts.
            self.start(app)

    def options_for(self, app: Flask) -> EkbatanOptions:
        """The options for ``app``: its ``app.config`` with what this extension was given over it."""
        defaults = EkbatanOptions()
        # Only the fields the constructor's options set win: one that leaves, say, ``config``
        # at its default must not hide the application's EKBATAN_CONFIG.
        chosen = {
            f.name: getattr(self._options, f.name)
            for f in dataclasses.fields(EkbatanOptions)
            if getattr(self._options, f.name) != getattr(defaults, f.name)
        }
        return EkbatanOptions.of(EkbatanOptions.from_mapping(app.config), **{**chosen, **self._given})

    # ------------------------------------------------------------------ per application
    def _state(self, app: Flask | None) -> tuple[Flask, _AppState]:
        if app is None:
            app = self._current_app()
        state = self._state_here(app)
        if state is None:
            raise RuntimeError(f"Ekbatan.init_app was not called for the application {app.name!r}")
        return app, state

    def _state_here(self, app: Flask) -> _AppState | None:
        """This process's state of ``app``; None if ``init_app`` was not called for it."""
        state = self._states.get(app)
        return None if state is None else state.here()

    def _current_app(self) -> Flask:
        if has_app_context():
            return _app_of_this_context()
        apps = list(self._states.keys())
        if len(apps) == 1:
            return apps[0]
        raise RuntimeError(
            "no application context: pass the application, or use Ekbatan inside a request or "
            "'with app.app_context():'"
            + (" (this Ekbatan serves several applications)" if apps else " (init_app was never called)")
        )

    def runtime_for(self, app: Flask | None = None) -> EkbatanRuntime:
        """This process's graph for ``app`` (default: the current application), built on first use."""
        app, state = self._state(app)
        with state.lock:
            if state.runtime is None:
                state.runtime = build_runtime(options=state.options)
            return state.runtime

    @property
    def runtime(self) -> EkbatanRuntime:
        return self.runtime_for()

    @property
    def action_executor(self) -> ActionExecutor:
        """The current application's action executor."""
        return self.runtime_for().action_executor

    @property
    def scheduler_client(self) -> SchedulerClient:
        """Schedules, reschedules, cancels and lists executions in ``scheduled_tasks``."""
        return self.runtime_for().scheduler_client

    @property
    def database_registry(self) -> DatabaseRegistry:
        return self.runtime_for().database_registry

    @property
    def settings(self) -> EkbatanSettings:
        return self._state(None)[1].settings

    def start(self, app: Flask | None = None) -> EkbatanRuntime:
        """Build this process's graph if needed and start it (migrations when asked, then the
        job registry). Idempotent; call it from the process that serves, after any fork."""
        app, state = self._state(app)
        with state.lock:
            runtime = self.runtime_for(app)
            if not runtime.started:
                _stop_at_exit()
                runtime.start()
                log.info(
                    "ekbatan started for %r in process %d (%s)",
                    app.name,
                    os.getpid(),
                    "no job registry" if runtime.job_registry is None else f"{len(runtime.jobs)} job(s)",
                )
            return runtime

    def stop(self, app: Flask | None = None) -> None:
        """Stop the job registry (jobs drain), then close the pools. The next use builds anew."""
        app, state = self._state(app)
        with state.lock:
            runtime, state.runtime = state.runtime, None
        if runtime is not None:
            runtime.stop()
            log.info("ekbatan stopped for %r in process %d", app.name, os.getpid())

    def started(self, app: Flask | None = None) -> bool:
        """Whether the job registry of ``app`` runs in this process."""
        runtime = self._state(app)[1].runtime
        return runtime is not None and runtime.started

    def health_blueprint(
        self,
        path: str = "/health/ekbatan",
        *,
        max_poll_age: timedelta | None = None,
        max_failing_tasks: int | None = None,
        count_failing_tasks: bool = True,
        failing_tasks_cache: timedelta = FAILING_TASKS_CACHE,
        name: str = "ekbatan_health",
    ) -> Blueprint:
        """A blueprint with one readiness endpoint, ``GET path``: 200 when ready, else 503, with
        the JSON report of :func:`~ekbatan.integrations.health.health_report` (the same as
        FastAPI's ``health_router``). Register it with ``app.register_blueprint(...)``. Like any
        request, the probe's first call starts Ekbatan unless ``EKBATAN_AUTOSTART`` is off; not
        started, it answers 503 "ekbatan is not started"."""
        blueprint = Blueprint(name, __name__)

        @blueprint.get(path)
        def ekbatan_health() -> tuple[Response, int]:
            state = self._state_here(_app_of_this_context())
            ready, report = health_report(
                None if state is None else state.runtime,
                max_poll_age=max_poll_age,
                max_failing_tasks=max_failing_tasks,
                count_failing_tasks=count_failing_tasks,
                failing_tasks_cache=failing_tasks_cache,
            )
            return jsonify(report), 200 if ready else 503

        return blueprint

    def metrics_blueprint(self, path: str = "/metrics", *, name: str = "ekbatan_metrics") -> Blueprint:
        """A blueprint with ``GET path`` serving the metrics in Prometheus' text format
        (OpenMetrics when the scraper asks for it), the same as FastAPI's ``metrics_router``;
        register it with ``app.register_blueprint(...)``. 404, saying why, when
        ``ekbatan.observability.metrics`` is off. Like any request, the first scrape starts
        Ekbatan unless ``EKBATAN_AUTOSTART`` is off. Each worker process serves its own
        counters: see docs/observability-endpoints.md."""
        blueprint = Blueprint(name, __name__)

        @blueprint.get(path)
        def ekbatan_metrics() -> Response:
            state = self._state_here(_app_of_this_context())
            registry = None if state is None or state.runtime is None else state.runtime.metrics_registry
            if registry is None:
                return Response(METRICS_OFF, status=404, content_type="text/plain; charset=utf-8")
            body, content_type = render_metrics(registry, request.headers.get("Accept"))
            return Response(body, content_type=content_type)

        return blueprint

    # ------------------------------------------------------------------ the operator view
    def operator_blueprint(
        self,
        app: Flask | None = None,
        *,
        url_prefix: str = "/ekbatan",
        name: str = "ekbatan_operator",
        **operator_options: Any,
    ) -> Blueprint:
        """The operator view (``ekbatan.integrations.operator``) as a blueprint serving every
        address under ``url_prefix``; register it with ``app.register_blueprint(...)``. Unlike
        :meth:`mount_operator_view`, its requests go through Flask: the application's and the
        blueprint's ``before_request`` hooks run first (one answering 401 or 403 refuses the
        page or action). The view runs outside Flask's context (no ``flask.g`` there): what a hook
        puts in ``request.environ`` reaches ``authorize`` and ``actor`` as
        ``request.scope["wsgi_environ"]``. The pages read the runtime of ``app`` (default: the
        application the blueprint is registered on) in the serving process and start nothing;
        ``operator_options`` are :func:`~ekbatan.integrations.operator.operator_app`'s, checked
        at registration; pages refresh by polling."""
        return operator_view_blueprint(
            lambda serving: self.runtime_for(app or serving),
            url_prefix=url_prefix,
            name=name,
            **operator_options,
        )

    def mount_operator_view(self, app: Flask, path: str = "/ekbatan", **options: Any) -> None:
        """Serve the operator view (``ekbatan.integrations.operator``) under ``path`` beside
        ``app``: its pages read through this extension's runtime in the serving process and
        start nothing. ``options`` are :func:`~ekbatan.integrations.operator.operator_app`'s
        (``read_only``, ``authorize``, ``actor``, ``title``, ...); pages refresh by polling.
        Flask's own request hooks do not run for these pages: guard them with ``authorize``, or
        serve them with :meth:`operator_blueprint`, which the hooks guard."""
        check_mount_path(path)
        from werkzeug.middleware.dispatcher import DispatcherMiddleware

        from ekbatan.integrations.operator import operator_wsgi

        view = operator_wsgi(lambda: self.runtime_for(app), **options)
        app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {path: view})  # type: ignore[method-assign]

    # ------------------------------------------------------------------ when to start
    def _start_on_first_request(self) -> None:
        state = self._state_here(_app_of_this_context())
        if state is not None and (state.runtime is None or not state.runtime.started):
            self.start()

    def _start_for_cli_command(self, app: Flask, **_: Any) -> None:
        command = _cli_command_path()
        # ``run`` serves (its requests and the reloader rule start it); ``ekbatan`` commands
        # must work on a database the job registry cannot start on yet (migrate).
        if len(command) > 1 and command[1] not in ("run", ekbatan_cli.name):
            self.start(app)

    # ------------------------------------------------------------------ process lifecycle
    def _stop_all_here(self) -> None:
        """Stop every graph of this process; stop skips those a parent process built."""
        for app in list(self._states.keys()):
            try:
                self.stop(app)
            except Exception:
                log.exception("stopping ekbatan for %r failed", app.name)


#: every extension made in this process (and copied into its forks), for the gunicorn hooks and
#: the stop at exit
_extensions: weakref.WeakSet[Ekbatan] = weakref.WeakSet()
#: graphs a parent process built, kept referenced: see _AppState.here
_left_to_parent: list[EkbatanRuntime] = []
#: one lock per process: a lock fork() copies may be held by a thread of the parent
_process_locks: dict[int, threading.Lock] = {}
#: whether _stop_everything_started_here runs at exit; a forked child inherits the registration
_stop_at_exit_registered = False


def _process_lock() -> threading.Lock:
    # setdefault is atomic: the threads of one process all get the same lock
    return _process_locks.setdefault(os.getpid(), threading.Lock())


def _stop_everything_started_here() -> None:
    for extension in list(_extensions):
        extension._stop_all_here()


def _stop_at_exit() -> None:
    """Stop, when the interpreter exits, what this process started and nobody stopped."""
    global _stop_at_exit_registered
    with _process_lock():
        if not _stop_at_exit_registered:
            atexit.register(_stop_everything_started_here)
            _stop_at_exit_registered = True


def gunicorn_post_worker_init(worker: Any) -> None:
    """gunicorn hook (``post_worker_init = ...`` in ``gunicorn.conf.py``): start every
    application's job registry as the worker boots — after the fork, the application loaded."""
    for extension in list(_extensions):
        for app in list(extension._states.keys()):
            if extension._states[app].autostart:
                extension.start(app)


def gunicorn_worker_exit(server: Any, worker: Any) -> None:
    """gunicorn hook (``worker_exit = ...``): stop this worker's job registries before it exits."""
    _stop_everything_started_here()


# ---------------------------------------------------------------------- helpers
def _app_of_this_context() -> Flask:
    # flask annotates current_app as the Flask it stands for; it is werkzeug's proxy to it
    return cast("LocalProxy[Flask]", current_app)._get_current_object()


def _cli_command_path() -> list[str]:
    """``["flask", "ekbatan", "migrate"]`` inside a CLI command; empty outside one."""
    ctx = click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return names[::-1]
