"""Package namespaces that import a submodule when one of its names is first used.

``import ekbatan.core.persistence._liveness`` runs ``ekbatan/core/__init__.py`` and
``ekbatan/core/persistence/__init__.py`` first. Had those imported everything they re-export,
a process needing only the pool's liveness check (a scheduler on a hand-built engine, which
depends on SQLAlchemy alone) would load the settings models, pydantic and the outbox with it:
about 20 MB and 0.4 s here. So those packages resolve their re-exported names on first access
(PEP 562); ``from ekbatan.core import ConnectionProvider`` works as before, and so does
``ekbatan.core.persistence`` after ``import ekbatan.core`` (a submodule is imported on first
access too, as the eager imports used to bind them all).

The map given here is the one list of what a package exports: its ``__all__`` is derived from
it. Type checkers cannot run it, so each package also imports the same names as ``X as X`` under
``TYPE_CHECKING``; a test holds the two equal.

An exported name must not also be a submodule's name: importing the submodule binds its name
on the package and hides the export. The submodules' names all begin with ``_`` and the exports'
never do.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of ``package``, which re-exports
    ``exports``: for each submodule (its full name), the names taken from it, each ``"name"`` or,
    renamed as an import would, ``"name as exported_name"``."""
    home: dict[str, tuple[str, str]] = {}
    for module, names in exports.items():
        for entry in names:
            attribute, _, exported = entry.partition(" as ")
            home[exported or attribute] = (module, attribute)

    def __getattr__(name: str) -> Any:
        found = home.get(name)
        if found is None:
            return _submodule(package, name)
        module, attribute = found
        value = getattr(importlib.import_module(module), attribute)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | home.keys())

    return __getattr__, __dir__, sorted(home)


def _submodule(package: str, name: str) -> Any:
    """``package.name`` when it is a submodule (importing it binds it on the package)."""
    if not name.isidentifier():
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{name}":  # the submodule exists; something it imports does not
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
