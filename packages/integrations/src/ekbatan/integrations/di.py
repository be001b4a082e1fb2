"""``EkbatanContainer``: the runtime :func:`~ekbatan.integrations.build_runtime` builds, as a
dependency-injector container.

Point it at your ``application.yml`` and packages, then ``init_resources()`` builds and starts
the runtime and ``shutdown_resources()`` stops it — the jobs drain first, then the pools close::

    container = EkbatanContainer(config_path="application.yml", packages=["myapp"])
    container.init_resources()
    ...
    container.shutdown_resources()

Two resources hold one :class:`~ekbatan.integrations.EkbatanRuntime`: ``runtime`` is it built
(stopped on shutdown), ``started`` is it started. Every other provider of Ekbatan's is either an
option (``options``, and one provider per option: ``config_path``, ``packages``, ``application``,
``clock``, ``codec``, ``migrate_on_start``, ``require_database``, ``extra_jobs``,
``extra_handlers``, ``extra_tasks``, ``customize_scheduler``) or a part read from the runtime
(``settings``, ``database_registry``, ``action_executor``, ``jobs``, ``job_registry``, …).
Building, starting and stopping are the runtime's own, so the container builds exactly what
every other integration builds.

Extend it (``class Container(EkbatanContainer): ...``) to add your own providers: discovered
classes get their constructor parameters from them (and from an ``application`` container), by
name then by type, before Ekbatan's own objects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from dependency_injector import containers, providers
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ekbatan.integrations.di needs dependency-injector: pip install 'ekbatan-integrations[di]'"
    ) from error

from ekbatan.core import DatabaseRegistry, EkbatanSettings
from ekbatan.integrations.construction import offers_of_container
from ekbatan.integrations.options import EkbatanOptions
from ekbatan.integrations.runtime import EkbatanRuntime, build_runtime, load

#: the provider that sets each option, by the ``EkbatanOptions`` field it sets
_OPTION_PROVIDERS = {
    "config": "config_path",
    "packages": "packages",
    "container": "application",
    "clock": "clock",
    "codec": "codec",
    "migrate_on_start": "migrate_on_start",
    "require_database": "require_database",
    "extra_jobs": "extra_jobs",
    "extra_handlers": "extra_handlers",
    "extra_tasks": "extra_tasks",
    "customize_scheduler": "customize_scheduler",
    "metrics_registry": "metrics_registry",
}

#: the runtime's parts, and what to change instead of replacing one. A replaced part would not
#: be the one the runtime runs with (its jobs would keep using the runtime's own), so building
#: refuses it rather than let both exist. ``scheduler_client`` is absent: nothing Ekbatan runs
#: uses it, so a test may replace it freely.
_REPLACE_INSTEAD = {
    "jobs_pool": (
        "the jobs pool is the default shard's jobs-config in the settings: change it there, or "
        "pass EkbatanSettings of your own through config_path"
    ),
    "discovered": "set packages",
    "action_executor": "set packages, or clock and codec",
    "event_handlers": "set packages, or add handlers with extra_handlers",
    "event_handler_registry": "set packages, or add handlers with extra_handlers",
    "jobs": "set packages, or add jobs with extra_jobs",
    "job_registry": "adjust the engine with customize_scheduler",
    "migrations": "set migrate_on_start",
}

# Containers whose runtime is being built, in this thread: asked for again meanwhile, the
# runtime would be built again inside its own build, without end.
_building = threading.local()


class _Offered:
    """What discovered classes' constructors are offered, as the one container ``build_runtime``
    takes: the application container's providers first, then those the subclass adds.

    Ekbatan's own providers are left out: they are the runtime being built, and build_runtime
    offers its parts itself (``settings``, ``database_registry``, ``action_executor``, …)."""

    def __init__(self, application: Any, container: Any) -> None:
        offered: dict[str, Any] = {}
        if application is not None:
            offers_of_container(application)  # refuses anything but a container, saying so
            offered.update(application.providers)
        for name, provider in container.providers.items():
            if name not in _EKBATAN_PROVIDERS:
                offered.setdefault(name, provider)
        self.providers: Mapping[str, Any] = offered


def _options(container: Any) -> EkbatanOptions:
    """``options`` with every option provider that is set applied over it (None leaves it)."""
    given = {field: getattr(container, name)() for field, name in _OPTION_PROVIDERS.items()}
    return EkbatanOptions.of(container.options(), **given)


def _settings(container: Any) -> Iterator[EkbatanSettings]:
    # a resource, not a singleton: shutdown_resources() forgets it, and a config_path overridden
    # before the next init_resources() is read again
    yield load(_options(container).config_or_default)


def _database_registry(container: Any, settings: EkbatanSettings) -> Iterator[DatabaseRegistry]:
    """The container's own registry, handed to the runtime: the application's providers may
    depend on it while the runtime's discovered classes are being built (they are offered
    those providers), and it closes after the runtime has stopped."""
    given = _options(container).database_registry
    registry = DatabaseRegistry.from_config(settings) if given is None else given
    try:
        yield registry
    finally:
        if given is None:  # one the application passed in is the application's to close
            registry.close()


def _refuse_replaced_parts(container: Any) -> None:
    for name, instead in _REPLACE_INSTEAD.items():
        provider = container.providers.get(name)
        ours = isinstance(provider, providers.Callable) and provider.provides is _part
        if not ours or provider.overridden:
            raise TypeError(
                f"EkbatanContainer.{name} was replaced, but the runtime builds its own and would not "
                f"use yours: {instead}"
            )


def _built(
    container: Any, settings: EkbatanSettings, database_registry: DatabaseRegistry
) -> Iterator[EkbatanRuntime]:
    """The runtime, built (nothing connects yet) and stopped when the resource shuts down.

    ``settings`` and ``database_registry`` are the container's resources: a direct dependency,
    so dependency-injector shuts the runtime down (its jobs drained) before closing the pools."""
    _refuse_replaced_parts(container)
    building: set[int] = _building.__dict__.setdefault("containers", set())
    if id(container) in building:
        raise RuntimeError(
            "a provider that a discovered class needs depends on a part of Ekbatan's runtime "
            "(action_executor, jobs, job_registry, …), which exists only once the classes are "
            "built: let the class ask for the part itself, or give your provider the part's "
            "provider (EkbatanContainer.action_executor.provider) to call later; settings and "
            "database_registry may be depended on"
        )
    building.add(id(container))
    try:
        options = _options(container)
        runtime = build_runtime(
            options=options.replace(
                config=settings,
                database_registry=database_registry,
                container=_Offered(options.container, container),
            )
        )
    except BaseException:
        _close_own_registry(container)
        raise
    finally:
        building.discard(id(container))
    try:
        yield runtime
    finally:
        runtime.stop()


def _close_own_registry(container: Any) -> None:
    """After a failed build or start, close the pools at once, as ``build_runtime``'s runtime
    does, rather than at ``shutdown_resources()``: the registry resource's own shutdown, which
    leaves open a registry the application passed in (an override, or the option)."""
    container.database_registry.shutdown()


def _started(container: Any, runtime: EkbatanRuntime) -> Iterator[EkbatanRuntime]:
    """The runtime started: migrations if asked, then the job registry; a failed start stops it
    and closes the container's own pools at once."""
    try:
        runtime.start()
    except BaseException:
        runtime.stop()
        _close_own_registry(container)
        raise
    try:
        yield runtime
    finally:
        runtime.stop()


def _part(runtime: EkbatanRuntime, name: str) -> Any:
    if name == "event_handlers":
        registry = runtime.event_handler_registry
        return [registry.handler_for(handler) for handler in registry.handler_names()]
    if name == "migrations":
        return runtime.migrate_on_start
    return getattr(runtime, name)


# dependency-injector's stubs do not declare the metaclass its containers.pyx defines
class _SharedSelf(containers.DeclarativeContainerMetaClass):  # type: ignore[name-defined,misc]
    """Gives a subclass the ``__self__`` provider of its base, and re-links what it redefines.

    The ``runtime`` resource receives the container itself, to read the option providers and
    offer the application's providers by name. dependency-injector gives every container class a
    new ``Self`` provider, and ``runtime``, inherited, would keep the base's: it would see the
    base container, without what the application's subclass adds. Sharing one ``Self`` through
    the hierarchy makes it see the container actually instantiated.

    For the same reason, a provider redefined in a subclass (``settings = providers.Object(...)``,
    ``database_registry = providers.Resource(...)``) would be ignored by the inherited providers
    that use it (``runtime`` takes both). The inherited providers, and the subclass's own that
    name a base's (``EkbatanContainer.database_registry``), are copied so that they use the
    redefinition and share one instance of everything else.
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
    """The Ekbatan runtime and its parts as providers; configure it through its options."""

    __self__ = providers.Self()

    #: how to build and run Ekbatan; each option provider below that is set wins over it
    options: providers.Object[Any] = providers.Object(EkbatanOptions())
    #: the application.yml path or loaded settings (default: options.config, else application.yml)
    config_path: providers.Object[Any] = providers.Object(None)
    #: the packages to scan
    packages: providers.Object[Any] = providers.Object(None)
    #: the application's own container, asked first for discovered classes' parameters
    application: providers.Object[Any] = providers.Object(None)
    clock: providers.Object[Any] = providers.Object(None)
    codec: providers.Object[Any] = providers.Object(None)
    #: run the framework migrations before the job registry starts
    migrate_on_start: providers.Object[Any] = providers.Object(None)
    #: False starts degraded while the jobs database cannot be reached
    require_database: providers.Object[Any] = providers.Object(None)
    extra_jobs: providers.Object[Any] = providers.Object(None)
    extra_handlers: providers.Object[Any] = providers.Object(None)
    extra_tasks: providers.Object[Any] = providers.Object(None)
    customize_scheduler: providers.Object[Any] = providers.Object(None)
    #: the prometheus_client registry the metrics are served from (ekbatan.observability.metrics)
    metrics_registry: providers.Object[Any] = providers.Object(None)

    #: loaded from the config; the application's providers may depend on these two
    settings = providers.Resource(_settings, __self__)
    database_registry = providers.Resource(_database_registry, __self__, settings)
    runtime = providers.Resource(_built, __self__, settings, database_registry)
    started = providers.Resource(_started, __self__, runtime)

    discovered = providers.Callable(_part, runtime, "discovered")
    action_executor = providers.Callable(_part, runtime, "action_executor")
    event_handlers = providers.Callable(_part, runtime, "event_handlers")
    event_handler_registry = providers.Callable(_part, runtime, "event_handler_registry")
    jobs = providers.Callable(_part, runtime, "jobs")
    jobs_pool = providers.Callable(_part, runtime, "jobs_pool")
    scheduler_client = providers.Callable(_part, runtime, "scheduler_client")
    migrations = providers.Callable(_part, started, "migrations")
    job_registry = providers.Callable(_part, started, "job_registry")


_EKBATAN_PROVIDERS = frozenset(EkbatanContainer.cls_providers)
