"""``scan(packages)``: import packages recursively and collect the classes marked for Ekbatan.

Found are the classes marked ``@distributed_job``, ``@event_handler`` and ``@action``, and the
tasks of ``@one_time_task`` / ``@recurring_task_with_persistent_schedule`` (the engine task a
decorated function became, or the decorated class), that are *defined* in a scanned module (one
imported into another module is found once, where it is defined). The order is stable: by
module name, then by the order of definition.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ekbatan.core.outbox import is_action
from ekbatan.distributed_jobs import is_distributed_job, task_definition_of
from ekbatan.distributed_jobs.scheduler import Task
from ekbatan.local_event_handler import is_event_handler


class DiscoveryError(ImportError):
    """A scanned package or module could not be imported; the original error is chained."""


@dataclass(frozen=True)
class Discovered:
    """The marked classes of the scanned packages, each list in a stable order.

    ``tasks`` holds engine tasks (a decorated function) and decorated classes (built and
    wrapped into an engine task by ``build_runtime``) in one list, in definition order.
    """

    jobs: tuple[type, ...] = ()
    handlers: tuple[type, ...] = ()
    actions: tuple[type, ...] = ()
    modules: tuple[str, ...] = field(default=(), repr=False)
    tasks: tuple[Task[Any] | type, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.jobs or self.handlers or self.actions or self.tasks)


def scan(packages: Iterable[str | ModuleType] | str | ModuleType) -> Discovered:
    """Import every module of ``packages`` (names such as ``"myapp.jobs"``, or modules) and
    return the marked classes defined in them."""
    roots: Iterable[str | ModuleType] = [packages] if isinstance(packages, str | ModuleType) else packages
    modules: dict[str, ModuleType] = {}
    for package in roots:
        for module in _walk(package):
            modules.setdefault(module.__name__, module)
    jobs: list[type] = []
    handlers: list[type] = []
    actions: list[type] = []
    tasks: list[Task[Any] | type] = []
    for name in sorted(modules):
        for cls in _classes_defined_in(modules[name]):
            if is_distributed_job(cls):
                jobs.append(cls)
            if is_event_handler(cls):
                handlers.append(cls)
            if is_action(cls):
                actions.append(cls)
        tasks += _tasks_defined_in(modules[name])
    return Discovered(
        jobs=tuple(jobs),
        handlers=tuple(handlers),
        actions=tuple(actions),
        modules=tuple(sorted(modules)),
        tasks=tuple(tasks),
    )


def _walk(package: str | ModuleType) -> list[ModuleType]:
    if isinstance(package, ModuleType):
        root = package
    else:
        if not isinstance(package, str) or not package.strip():
            raise ValueError(
                f"packages to scan are dotted module names such as 'myapp.jobs'; got {package!r}"
            )
        root = _import(package.strip(), package.strip())
    found = [root]
    path = getattr(root, "__path__", None)
    if path is None:  # a plain module: nothing below it
        return found
    errors: list[str] = []
    for info in pkgutil.walk_packages(path, prefix=f"{root.__name__}.", onerror=errors.append):
        found.append(_import(info.name, root.__name__))
    if errors:
        raise DiscoveryError(f"while scanning {root.__name__}, these packages could not be listed: {errors}")
    return found


def _import(name: str, scanning: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as error:
        where = "" if name == scanning else f" while scanning {scanning}"
        raise DiscoveryError(f"could not import {name}{where}: {type(error).__name__}: {error}") from error


def _classes_defined_in(module: ModuleType) -> list[type]:
    # a module's namespace keeps the order its names were bound: definition order
    return [
        obj for obj in vars(module).values() if isinstance(obj, type) and obj.__module__ == module.__name__
    ]


def _tasks_defined_in(module: ModuleType) -> list[Task[Any] | type]:
    found: list[Task[Any] | type] = []
    for obj in vars(module).values():
        if isinstance(obj, type) and obj.__module__ != module.__name__:
            continue
        definition = task_definition_of(obj)
        # a task's mark records the module its function or class was defined in
        if definition is not None and definition.module == module.__name__ and obj not in found:
            found.append(obj)
    return found


def describe(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
