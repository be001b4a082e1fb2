"""The migrations contract: who contributes which versioned DDL.

A package contributes through the entry-point group ``ekbatan.migrations``; each entry point
loads a zero-argument callable returning a list of
``(component, version, description, statements)`` tuples, where ``statements(dialect)`` returns
the SQL statements for ``"postgresql"``, ``"mariadb"``, ``"mysql"`` or ``"sqlite"``. A
``statements`` callable that also accepts the keyword ``eventlog_schema`` receives the target's
eventlog schema/database name (core's eventlog tables use it; others may ignore it).

Each statement must be idempotent (``IF NOT EXISTS``): MySQL and MariaDB commit DDL as it runs,
so a version interrupted there is completed by running all of its statements again.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NamedTuple

from ekbatan.core.persistence._dialect_names import DialectName

ENTRY_POINT_GROUP = "ekbatan.migrations"


class Migration(NamedTuple):
    component: str
    version: str
    description: str
    statements: Callable[..., list[str]]

    def statements_for(self, dialect: DialectName | str, *, eventlog_schema: str = "eventlog") -> list[str]:
        dialect_name = DialectName(dialect).value
        if _accepts_eventlog_schema(self.statements):
            produced = self.statements(dialect_name, eventlog_schema=eventlog_schema)
        else:
            produced = self.statements(dialect_name)
        if not isinstance(produced, list | tuple) or not all(isinstance(s, str) for s in produced):
            raise MigrationContributorError(
                f"{self.component} {self.version}: statements({dialect_name!r}) must return a list of SQL strings, "
                f"got {type(produced).__name__}"
            )
        return list(produced)

    def checksum(self, statements: list[str]) -> str:
        return hashlib.sha256("\n;\n".join(statements).encode()).hexdigest()


#: a migration as a contributor may write it: ``(component, version, description, statements)``
MigrationTuple = tuple[str, str, str, Callable[..., list[str]]]


class MigrationContributorError(RuntimeError):
    """A contributor could not be loaded, or returned something that breaks the contract."""


def load_contributions(points: Iterable[EntryPoint] | None = None) -> list[Migration]:
    """Every migration contributed through ``ekbatan.migrations``, in apply order.

    A contributor that fails to import or returns a malformed list stops everything here,
    before any database is touched, with an error naming the entry point.
    """
    found = entry_points(group=ENTRY_POINT_GROUP) if points is None else points
    migrations: list[Migration] = []
    for point in found:
        try:
            factory = point.load()
            produced = factory()
        except Exception as error:
            raise MigrationContributorError(
                f"migration contributor {point.name!r} = {point.value!r} (entry-point group "
                f"{ENTRY_POINT_GROUP!r}) failed to load: {type(error).__name__}: {error}. Fix or uninstall "
                f"that package, or pass contributions= explicitly"
            ) from error
        migrations.extend(validate_contribution(produced, f"contributor {point.name!r} ({point.value})"))
    return plan(migrations)


def validate_contribution(produced: Any, origin: str) -> list[Migration]:
    if not isinstance(produced, list | tuple):
        raise MigrationContributorError(
            f"{origin} must return a list of migrations, got {type(produced).__name__}"
        )
    checked: list[Migration] = []
    for item in produced:
        if not isinstance(item, tuple) or len(item) != 4:
            raise MigrationContributorError(
                f"{origin}: each migration must be a (component, version, description, statements) tuple; got {item!r}"
            )
        component, version, description, statements = item
        if not all(isinstance(v, str) and v.strip() for v in (component, version)) or not isinstance(
            description, str
        ):
            raise MigrationContributorError(
                f"{origin}: component and version must be non-blank strings; got {item!r}"
            )
        if not callable(statements):
            raise MigrationContributorError(f"{origin}: statements of {component} {version} must be callable")
        checked.append(Migration(component, version, description, statements))
    return checked


def plan(migrations: Iterable[Migration | MigrationTuple]) -> list[Migration]:
    """Components in alphabetical order, each component's versions in natural order; no duplicates."""
    checked = validate_contribution(list(migrations), "contributions")
    seen: set[tuple[str, str]] = set()
    for migration in checked:
        key = (migration.component, migration.version)
        if key in seen:
            raise MigrationContributorError(f"migration {key[0]} {key[1]} is contributed twice")
        seen.add(key)
    return sorted(checked, key=lambda m: (m.component, version_key(m.version)))


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: ``"2" < "10"``, ``"1.2" < "1.10"``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|[^\d.]+", version)
    )


def _accepts_eventlog_schema(statements: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(statements).parameters
    except (TypeError, ValueError):
        return False
    return "eventlog_schema" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
