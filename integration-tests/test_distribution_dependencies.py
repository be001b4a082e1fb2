"""Each distribution under ``packages/`` declares what its sources import, and imports what it
declares: ``pip install`` of one of them brings what it needs and nothing it does not. The
engine in particular installs and imports without ekbatan-core, pydantic or PyYAML.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = sorted(path.parent for path in (REPO / "packages").glob("*/pyproject.toml"))

# Declared but never imported by name, each for a reason:
NOT_IMPORTED = {
    "tzdata": "zoneinfo's time-zone data, for systems without a tz database",
    "psycopg": "a driver: SQLAlchemy loads it from a URL's +psycopg",
    "pymysql": "a driver: SQLAlchemy loads it from a URL's +pymysql",
}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a distribution name from {requirement!r}"
    return _normalized(match.group(1))


def _project(distribution: Path) -> dict:
    return tomllib.loads((distribution / "pyproject.toml").read_text("utf-8"))["project"]


def _declared(distribution: Path) -> tuple[set[str], set[str]]:
    """(required, optional) distribution names, normalized."""
    project = _project(distribution)
    required = {_requirement_name(r) for r in project.get("dependencies", [])}
    optional = {
        _requirement_name(r) for extra in project.get("optional-dependencies", {}).values() for r in extra
    }
    return required, optional


def _imported_modules(distribution: Path) -> dict[str, set[str]]:
    """Every absolute import in the distribution's sources: module → the files importing it."""
    found: dict[str, set[str]] = {}
    for path in (distribution / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                found.setdefault(module, set()).add(str(path.relative_to(distribution)))
    return found


def _distribution_of(module: str) -> str | None:
    """The distribution that provides ``module``; None for the standard library."""
    parts = module.split(".")
    if parts[0] in sys.stdlib_module_names:
        return None
    if parts[0] == "ekbatan":
        # one namespace package shared by every distribution here: ekbatan.<name> is ekbatan-<name>
        return _normalized(f"ekbatan-{parts[1]}")
    if (
        parts[0] == "opentelemetry"
        and len(parts) > 1
        and parts[1] in ("metrics", "trace", "context", "propagate")
    ):
        return "opentelemetry-api"  # a namespace package several distributions share
    if parts[0] == "opentelemetry" and len(parts) == 1:
        return "opentelemetry-api"
    providers = importlib.metadata.packages_distributions().get(parts[0])
    assert providers, f"no installed distribution provides {module!r}: declare it, or install the workspace"
    return _normalized(providers[0])


def _imported(distribution: Path) -> dict[str, set[str]]:
    """Distributions imported from: name → the files importing them (its own name left out)."""
    own = _normalized(_project(distribution)["name"])
    result: dict[str, set[str]] = {}
    for module, files in _imported_modules(distribution).items():
        provider = _distribution_of(module)
        if provider is not None and provider != own:
            result.setdefault(provider, set()).update(files)
    return result


def test_every_distribution_is_checked():
    assert {d.name for d in DISTRIBUTIONS} == {
        "core",
        "distributed_jobs",
        "local_event_handler",
        "integrations",
    }


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda d: d.name)
def test_every_import_is_declared(distribution: Path):
    required, optional = _declared(distribution)
    undeclared = {
        name: sorted(files)
        for name, files in _imported(distribution).items()
        if name not in required | optional
    }
    assert not undeclared, (
        f"{distribution.name}/pyproject.toml does not declare what these import: {undeclared}"
    )


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda d: d.name)
def test_every_declared_dependency_is_imported(distribution: Path):
    required, optional = _declared(distribution)
    unused = (required | optional) - _imported(distribution).keys() - NOT_IMPORTED.keys()
    assert not unused, f"{distribution.name}/pyproject.toml declares what nothing imports: {sorted(unused)}"


def test_the_engine_distribution_requires_nothing_of_ekbatan_core():
    required, optional = _declared(REPO / "packages" / "distributed_jobs")
    assert required == {"sqlalchemy", "tzdata"}
    assert "ekbatan-core" not in optional  # settings reach its builders as plain calls, from integrations


def test_importing_the_engine_and_facade_loads_no_settings_stack():
    """In a fresh interpreter: no ekbatan.core, pydantic, pydantic-settings or PyYAML."""
    probe = (
        "import sys\n"
        "import ekbatan.distributed_jobs\n"
        "import ekbatan.distributed_jobs.scheduler\n"
        "from ekbatan.distributed_jobs import JobRegistry\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert "ekbatan.distributed_jobs.scheduler" in loaded  # the probe did import the engine
    unwanted = [
        module
        for module in loaded
        if module.split(".")[0] in {"pydantic", "pydantic_core", "pydantic_settings", "yaml"}
        or module.startswith("ekbatan.core")
    ]
    assert unwanted == []
