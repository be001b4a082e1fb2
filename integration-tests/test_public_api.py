"""The public surface is a contract: each package's ``__all__`` is exactly the names it offers
(every listed name exists, every public name is listed, ``import *`` gives them), and the engine
depends on nothing but SQLAlchemy and the standard library."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
FUTURE_FEATURE = importlib.import_module("__future__")._Feature  # what `from __future__ import x` binds
PACKAGES = [
    "ekbatan.core",
    "ekbatan.core.config",
    "ekbatan.core.persistence",
    "ekbatan.core.persistence.dialects",
    "ekbatan.core.sharding",
    "ekbatan.core.migrations",
    "ekbatan.core.outbox",
    "ekbatan.distributed_jobs",
    "ekbatan.distributed_jobs.scheduler",
    "ekbatan.distributed_jobs.scheduler.dialects",
    "ekbatan.distributed_jobs.scheduler.schedules",
    "ekbatan.local_event_handler",
    "ekbatan.integrations",
    "ekbatan.integrations.cli",
    "ekbatan.integrations.operator",
    "ekbatan.integrations.demo",
]


def test_every_package_is_checked():
    found = {
        ".".join(init.parent.relative_to(src).parts)
        for src in REPO.glob("packages/*/src")
        for init in src.rglob("__init__.py")
    }
    # private subpackages (``scheduler/_table`` and the like) are no one's public surface
    found = {name for name in found if not any(part.startswith("_") for part in name.split("."))}
    assert found == set(PACKAGES)


def _public_names(module: ModuleType) -> set[str]:
    """What ``module`` offers: its names without a leading underscore, less its submodules
    (bound on a package once imported) and the bookkeeping of ``from __future__`` and typing."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and name != "TYPE_CHECKING"
        and not isinstance(getattr(module, name), ModuleType | FUTURE_FEATURE)
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_resolve_once(name):
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what the package does not define: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_every_public_name(name):
    module = importlib.import_module(name)
    unlisted = sorted(_public_names(module) - set(module.__all__))
    assert not unlisted, (
        f"{name} offers names its __all__ does not list (list them or make them private): {unlisted}"
    )


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_gives_exactly_all(name):
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(importlib.import_module(name).__all__)


def test_every_core_name_the_docs_mention_is_importable_from_ekbatan_core():
    """The docs' examples import from ``ekbatan.core``; a name documented there must be found there."""
    import ekbatan.core

    docs = Path(__file__).resolve().parent.parent / "docs"
    mentioned = {word for page in docs.rglob("*.md") for word in re.findall(r"\w+", page.read_text("utf-8"))}
    subpackages = ["config", "persistence", "sharding", "migrations", "outbox"]
    # DEFAULT_HEARTBEAT_INTERVAL in the docs is ekbatan.distributed_jobs's (Ekbatan's 10 s)
    documented = {
        name
        for sub in subpackages
        for name in importlib.import_module(f"ekbatan.core.{sub}").__all__
        if name in mentioned and name != "DEFAULT_HEARTBEAT_INTERVAL"
    }
    missing = sorted(documented - set(ekbatan.core.__all__))
    assert not missing, f"documented but not exported by ekbatan.core: {missing}"


def test_ekbatan_is_a_namespace_package():
    import ekbatan

    assert getattr(ekbatan, "__file__", None) is None, "there must be no ekbatan/__init__.py"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_engine_imports_only_sqlalchemy_and_the_standard_library():
    import ekbatan.distributed_jobs.scheduler as engine

    root = Path(engine.__file__).parent
    allowed_third_party = {"sqlalchemy"}
    offenders = {}
    for path in root.rglob("*.py"):
        for module in _imports(path):
            top = module.split(".")[0]
            if module.startswith("ekbatan.distributed_jobs.scheduler") or top in sys.stdlib_module_names:
                continue
            if top in allowed_third_party:
                continue
            # telemetry's optional extras (otel, prometheus_client), imported inside functions
            # only when a scheduler is asked for telemetry
            if path.relative_to(root).parts[0] == "_telemetry" and top in {
                "opentelemetry",
                "prometheus_client",
            }:
                continue
            offenders.setdefault(str(path.relative_to(root)), []).append(module)
    assert not offenders, f"the engine must stay independent of ekbatan.core and other packages: {offenders}"


def test_nothing_imports_upward():
    """core never imports distributed_jobs; distributed_jobs' facade never imports the engine's
    private modules through core; nothing imports the integrations."""
    import ekbatan.core as core

    root = Path(core.__file__).parent
    for path in root.rglob("*.py"):
        for module in _imports(path):
            assert not module.startswith(
                ("ekbatan.distributed_jobs", "ekbatan.local_event_handler", "ekbatan.integrations")
            ), f"{path} imports {module}: core must not depend on the packages built on it"


def test_every_module_imports():
    for package in ("ekbatan.core", "ekbatan.distributed_jobs"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
            if info.name.endswith(".demo"):
                continue
            importlib.import_module(info.name)


def test_other_packages_use_only_ekbatan_cores_public_names():
    """Outside ``ekbatan.core``, code imports from ``ekbatan.core`` or its subpackages'
    ``__init__`` (their ``__all__``), never from the modules behind them."""
    deep = re.compile(r"^\s*(?:from|import) (ekbatan\.core\.\w+\.\w+)", re.MULTILINE)
    found = {
        f"{path.relative_to(REPO)}: {module}"
        for name in ("distributed_jobs", "local_event_handler", "integrations")
        for path in (REPO / "packages" / name / "src").rglob("*.py")
        for module in deep.findall(path.read_text("utf-8"))
    }
    assert not found, sorted(found)
