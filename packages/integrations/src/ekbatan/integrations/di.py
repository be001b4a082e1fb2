"""``EkbatanContainer``: the whole product as a dependency-injector container.

Point it at your ``application.yml`` and packages, then ``init_resources()`` starts the job
registry and ``shutdown_resources()`` stops it — the jobs drain first, then the pools close
(dependency-injector shuts a resource down only after everything that depends on it)::

    container = EkbatanContainer()
    container.config_path.override("application.yml")
    container.packages.override(["myapp"])
    container.init_resources()
    ...
    container.shutdown_resources()

Extend it (``class Container(EkbatanContainer): ...``) to add your own providers: discovered
classes get their constructor parameters from the container's providers, by name then by type.
Redefine a provider in the subclass (``config_path = providers.Object("app.yml")``) or override it
on an instance to replace a piece, e.g. ``jobs_pool`` with a pool of your own. No job and
no handler means no job registry (the ``job_registry`` resource is then ``None``). Migrations
run only when ``migrate_on_start`` is overridden with True.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

try:
    from dependency_injector import containers, providers
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ekbatan.integrations.di needs dependency-injector: pip install 'ekbatan-integrations[di]'"
    ) from error

from ekbatan.core import ActionExecutor, DatabaseRegistry, EkbatanSettings, migrate
from ekbatan.core.outbox import Clock, EventCodec, UtcClock, default_codec
from ekbatan.core.persistence import ConnectionProvider
from ekbatan.core.sharding import jobs_connection_provider
from ekbatan.distributed_jobs import DistributedJob, JobRegistry
from ekbatan.distributed_jobs.scheduler import SchedulerClient
from ekbatan.integrations.construction import Offer, construct, offers_of_container
from ekbatan.integrations.discovery import Discovered, scan
from ekbatan.integrations.options import DEFAULT_CONFIG
from ekbatan.integrations.runtime import job_registry_for, load, pipeline_jobs_for
from ekbatan.local_event_handler import EventHandler, EventHandlerRegistry


def _sources(container: Any, application: Any) -> list[Mapping[str, Offer]]:
    # the application's own container first, then this one (which may be the user's subclass)
    return [offers_of_container(application), offers_of_container(container)]


def _database_registry(settings: EkbatanSettings) -> Iterator[DatabaseRegistry]:
    registry = DatabaseRegistry.from_config(settings)
    try:
        yield registry
    finally:
        registry.close()


def _action_executor(
    settings: EkbatanSettings,
    database_registry: DatabaseRegistry,
    clock: Clock,
    codec: EventCodec,
    discovered: Discovered,
    container: Any,
    application: Any,
) -> ActionExecutor:
    executor = ActionExecutor(database_registry, namespace=settings.namespace, clock=clock, codec=codec)
    sources = _sources(container, application)
    for action_class in discovered.actions:
        executor.register(construct(action_class, sources))
    return executor


def _handlers(discovered: Discovered, container: Any, application: Any) -> list[EventHandler[Any]]:
    sources = _sources(container, application)
    return [construct(cls, sources) for cls in discovered.handlers]


def _handler_registry(handlers: list[EventHandler[Any]]) -> EventHandlerRegistry:
    return EventHandlerRegistry.builder().with_handlers(handlers).build()


def _jobs(
    discovered: Discovered,
    container: Any,
    application: Any,
    settings: EkbatanSettings,
    database_registry: DatabaseRegistry,
    handler_registry: EventHandlerRegistry,
    clock: Clock,
    codec: EventCodec,
) -> list[DistributedJob]:
    sources = _sources(container, application)
    jobs: list[DistributedJob] = [construct(cls, sources) for cls in discovered.jobs]
    return jobs + pipeline_jobs_for(settings, database_registry, handler_registry, clock, codec)


def _jobs_pool(settings: EkbatanSettings, jobs: list[DistributedJob]) -> Iterator[ConnectionProvider | None]:
    if not jobs:
        yield None
        return
    pool = jobs_connection_provider(settings, strict=True)
    try:
        yield pool
    finally:
        pool.close()


def _migrations(settings: EkbatanSettings, migrate_on_start: bool) -> Iterator[bool]:
    if migrate_on_start:
        migrate(settings)
    yield migrate_on_start


def _job_registry(
    jobs: list[DistributedJob],
    jobs_pool: ConnectionProvider | None,
    settings: EkbatanSettings,
    migrated: bool,
    action_executor: ActionExecutor,
    database_registry: DatabaseRegistry,
) -> Iterator[JobRegistry | None]:
    # migrated and action_executor are here so that both exist before any job runs.
    # database_registry is here so that its pools close only after the jobs have stopped:
    # dependency-injector orders the shutdown of resources by their direct dependencies only,
    # and the jobs reach the shard pools through providers that are not resources. Closed
    # first, the pools were disposed under running pipeline jobs, whose next connections came
    # from fresh pools that nobody closed (psycopg's "deleted while still open" at exit).
    if not jobs:
        yield None
        return
    if jobs_pool is None:
        raise ValueError("jobs_pool was overridden with None, but there are jobs to run")
    registry = job_registry_for(jobs, jobs_pool, settings)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()


def _scheduler_client(job_registry: JobRegistry | None, settings: EkbatanSettings) -> SchedulerClient:
    if job_registry is not None:
        return job_registry.scheduler
    pool = jobs_connection_provider(settings, strict=True)
    return SchedulerClient(pool.engine, dialect=str(pool.dialect))


# dependency-injector's stubs do not declare the metaclass its containers.pyx defines
class _SharedSelf(containers.DeclarativeContainerMetaClass):  # type: ignore[name-defined,misc]
    """Gives a subclass the ``__self__`` provider of its base, and re-links what it redefines.

    Ekbatan's providers receive the container itself (to build discovered classes from its
    providers). dependency-injector gives every container class a new ``Self`` provider, and the
    providers a subclass inherits would keep pointing at the base's: they would see the base
    container, without the providers the application added. Sharing one ``Self`` through the
    hierarchy makes them see the container actually instantiated.

    For the same reason, a provider redefined in a subclass (``config_path = providers.Object(
    "app.yml")``, ``jobs_pool = providers.Resource(...)``) would be ignored by the inherited
    providers that use it. The inherited providers, and the subclass's own providers that name a
    base's (``EkbatanContainer.database_registry``), are copied so that they use the redefinition
    and share one instance of everything else.
    """

    def __new__(mcs, name: str, bases: tuple[type, ...], attributes: dict[str, Any]) -> Any:
        shared_self = next((v for v in attributes.values() if isinstance(v, providers.Self)), None)
        if shared_self is None:
            for base in bases:
                inherited = getattr(base, "__self__", None)
                if isinstance(inherited, providers.Self):
                    attributes["__self__"] = shared_self = inherited
                    break
        inherited_providers: dict[str, Any] = {}
        for base in bases:
            base_providers = getattr(base, "providers", None)
            if isinstance(base_providers, Mapping):
                inherited_providers.update(base_providers)
        redefined = {
            key
            for key, value in attributes.items()
            if key in inherited_providers and isinstance(value, providers.Provider)
        }
        if redefined:
            memo: dict[int, Any] = {id(inherited_providers[key]): attributes[key] for key in redefined}
            if shared_self is not None:
                memo[id(shared_self)] = shared_self
            relinked = {key: p for key, p in inherited_providers.items() if key not in redefined}
            relinked.update(
                (key, value)
                for key, value in attributes.items()
                if isinstance(value, providers.Provider)
                and not isinstance(value, providers.Self)
                and key not in redefined
            )
            attributes.update(providers.deepcopy(relinked, memo))
        return super().__new__(mcs, name, bases, attributes)


class EkbatanContainer(containers.DeclarativeContainer, metaclass=_SharedSelf):
    """Every Ekbatan piece as a provider; override or extend any of them."""

    __self__ = providers.Self()

    #: where the settings come from, and which packages to scan
    config_path = providers.Object(DEFAULT_CONFIG)
    packages = providers.Object(())
    #: the application's own container, asked first for discovered classes' parameters
    application: providers.Object[Any] = providers.Object(None)
    #: run the framework migrations before the job registry starts
    migrate_on_start = providers.Object(False)

    settings = providers.Singleton(load, config_path)
    clock = providers.Object(UtcClock())
    codec = providers.Object(default_codec)
    discovered = providers.Singleton(scan, packages)

    database_registry = providers.Resource(_database_registry, settings)
    action_executor = providers.Singleton(
        _action_executor, settings, database_registry, clock, codec, discovered, __self__, application
    )
    event_handlers = providers.Singleton(_handlers, discovered, __self__, application)
    event_handler_registry = providers.Singleton(_handler_registry, event_handlers)
    jobs = providers.Singleton(
        _jobs,
        discovered,
        __self__,
        application,
        settings,
        database_registry,
        event_handler_registry,
        clock,
        codec,
    )
    jobs_pool = providers.Resource(_jobs_pool, settings, jobs)
    migrations = providers.Resource(_migrations, settings, migrate_on_start)
    job_registry = providers.Resource(
        _job_registry, jobs, jobs_pool, settings, migrations, action_executor, database_registry
    )
    scheduler_client = providers.Singleton(_scheduler_client, job_registry, settings)
