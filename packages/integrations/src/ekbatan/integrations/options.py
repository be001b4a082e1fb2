"""``EkbatanOptions``: everything an entry point may say about how Ekbatan is built and run.

One frozen object, accepted alike by ``build_runtime``, FastAPI's ``ekbatan_lifespan``, Flask's
``Ekbatan(app)``/``init_app``, ``EkbatanContainer`` and ``ekbatan worker``. An entry point takes
``options=EkbatanOptions(...)`` and the same names as keyword arguments (a keyword given beside
``options`` wins over it); a new option is added here and reaches every entry point.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypedDict

from ekbatan.core import DatabaseRegistry, EkbatanSettings
from ekbatan.core.outbox import Clock, EventCodec
from ekbatan.distributed_jobs import DistributedJob
from ekbatan.distributed_jobs.scheduler import SchedulerBuilder, Task
from ekbatan.local_event_handler import EventHandler

__all__ = ["DEFAULT_CONFIG", "EkbatanOptions", "OptionFields"]

DEFAULT_CONFIG = "application.yml"

#: what a package to scan may be given as
PackageRef = str | ModuleType


def _packages(value: Iterable[PackageRef] | PackageRef | None) -> tuple[PackageRef, ...]:
    if value is None:
        return ()
    if isinstance(value, ModuleType):
        return (value,)
    if isinstance(value, str):
        # "shop.jobs, shop.handlers" is how a config key or an environment variable spells a list
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class EkbatanOptions:
    """How to build and run Ekbatan. Every field has a default; see the wiring docs' table.

    * ``config`` — the ``application.yml`` path, or settings already loaded;
    * ``packages`` — packages scanned for ``@distributed_job``, ``@event_handler``, ``@action``
      and tasks (names such as ``"shop.jobs"``, modules, or one comma-separated string);
    * ``container`` — the application's own dependency-injector container, asked first for
      discovered classes' constructor parameters (by name, then by type);
    * ``clock``, ``codec`` — the outbox's clock and event codec;
    * ``migrate_on_start`` — run the framework migrations before the jobs start;
    * ``require_database`` — False starts degraded while the jobs database is down;
    * ``extra_jobs``, ``extra_handlers``, ``extra_tasks`` — objects to register beside the
      discovered ones (jobs, event handlers, engine tasks);
    * ``customize_scheduler`` — adjusts the engine's builder last (threads, polling, …);
    * ``database_registry`` — a ``DatabaseRegistry`` the application built (and closes) to use
      instead of one built from ``ekbatan.sharding``: its own services and Ekbatan's then share
      one set of pools. Its settings should be the ones ``config`` names;
    * ``metrics_registry`` — the ``prometheus_client`` ``CollectorRegistry`` the metrics are
      served from when ``ekbatan.observability.metrics`` is on (default: one of the runtime's
      own, with the process collectors; pass ``prometheus_client.REGISTRY`` to have them on
      the ``/metrics`` your application already serves — one runtime per registry).
    """

    config: str | os.PathLike[str] | EkbatanSettings | None = None
    packages: tuple[PackageRef, ...] = ()
    container: Any = None
    clock: Clock | None = None
    codec: EventCodec | None = None
    migrate_on_start: bool = False
    require_database: bool = True
    extra_jobs: tuple[DistributedJob, ...] = ()
    extra_handlers: tuple[EventHandler[Any], ...] = ()
    extra_tasks: tuple[Task[Any], ...] = ()
    customize_scheduler: Callable[[SchedulerBuilder], Any] | None = field(default=None, repr=False)
    database_registry: DatabaseRegistry | None = field(default=None, repr=False)
    metrics_registry: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Lists are accepted where tuples are declared: kept as tuples, so options stay hashable
        # in spirit and no caller's list can change them afterwards.
        object.__setattr__(self, "packages", _packages(self.packages))
        for name in ("extra_jobs", "extra_handlers", "extra_tasks"):
            value = getattr(self, name)
            if value is None:
                value = ()
            if not isinstance(value, Iterable) or isinstance(value, str | bytes):
                raise TypeError(f"EkbatanOptions.{name} takes an iterable of objects, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name in ("migrate_on_start", "require_database"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"EkbatanOptions.{name} is True or False, got {getattr(self, name)!r}")
        if self.database_registry is not None and not isinstance(self.database_registry, DatabaseRegistry):
            raise TypeError(
                "EkbatanOptions.database_registry takes a DatabaseRegistry "
                f"(DatabaseRegistry.from_config(settings)), got {self.database_registry!r}"
            )
        if self.metrics_registry is not None and not callable(
            getattr(self.metrics_registry, "register", None)
        ):
            raise TypeError(
                "EkbatanOptions.metrics_registry takes a prometheus_client CollectorRegistry "
                f"(prometheus_client.REGISTRY or CollectorRegistry()), got {self.metrics_registry!r}"
            )
        if self.customize_scheduler is not None and not callable(self.customize_scheduler):
            raise TypeError(
                "EkbatanOptions.customize_scheduler takes a function of the scheduler builder, "
                f"got {self.customize_scheduler!r}"
            )

    @property
    def config_or_default(self) -> str | os.PathLike[str] | EkbatanSettings:
        return DEFAULT_CONFIG if self.config is None else self.config

    def replace(self, **changes: Any) -> EkbatanOptions:
        """A copy with ``changes``; an unknown name is refused, naming the known ones."""
        unknown = sorted(set(changes) - _FIELDS)
        if unknown:
            raise TypeError(f"unknown Ekbatan option(s) {unknown}; the options are {sorted(_FIELDS)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: EkbatanOptions | None = None, /, **given: Any) -> EkbatanOptions:
        """``options`` (default: all defaults) with the keyword arguments an entry point was
        given applied over it; arguments left at ``None`` keep what ``options`` says."""
        base = cls() if options is None else options
        if not isinstance(base, EkbatanOptions):
            raise TypeError(f"options must be an EkbatanOptions, got {options!r}")
        return base.replace(**{name: value for name, value in given.items() if value is not None})

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], prefix: str = "EKBATAN_") -> EkbatanOptions:
        """Options from a flat mapping such as Flask's ``app.config``: ``EKBATAN_OPTIONS`` (an
        ``EkbatanOptions``) as the base, then ``EKBATAN_<FIELD>`` for each field that is set
        (``EKBATAN_CONFIG``, ``EKBATAN_PACKAGES``, ``EKBATAN_MIGRATE_ON_START``,
        ``EKBATAN_REQUIRE_DATABASE``, ``EKBATAN_EXTRA_JOBS``, …). Flags accept booleans and
        the strings ``true/false``, ``1/0``, ``yes/no``, ``on/off``."""
        base = values.get(f"{prefix}OPTIONS")
        given: dict[str, Any] = {}
        for name in _FIELDS:
            key = f"{prefix}{name.upper()}"
            if key not in values:
                continue
            value = values[key]
            if name in ("migrate_on_start", "require_database"):
                value = _flag(key, value)
            given[name] = value
        return cls.of(base, **given)


class OptionFields(TypedDict, total=False):
    """The options but ``config`` and ``packages`` as keyword arguments: what every entry
    point accepts beside ``options=`` (``**fields: Unpack[OptionFields]``; ``config`` and
    ``packages`` are its own parameters), typed as :class:`EkbatanOptions` declares them."""

    container: Any
    clock: Clock | None
    codec: EventCodec | None
    migrate_on_start: bool
    require_database: bool
    extra_jobs: Iterable[DistributedJob]
    extra_handlers: Iterable[EventHandler[Any]]
    extra_tasks: Iterable[Task[Any]]
    customize_scheduler: Callable[[SchedulerBuilder], Any] | None
    database_registry: DatabaseRegistry | None
    metrics_registry: Any


_FIELDS = frozenset(f.name for f in dataclasses.fields(EkbatanOptions))
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{key} is a flag: write true or false, not {value!r}")
