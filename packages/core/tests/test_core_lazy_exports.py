"""ekbatan.core's packages resolve their re-exported names on first use (``_lazy_exports.py``)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import ekbatan.core

PACKAGES = ["ekbatan.core"] + [
    f"ekbatan.core.{info.name}" for info in pkgutil.iter_modules(ekbatan.core.__path__) if info.ispkg
]


def _type_checking_imports(package: str) -> dict[str, tuple[str, str]]:
    """What the package's ``if TYPE_CHECKING:`` block imports: name → (module, attribute)."""
    source = Path(importlib.import_module(package).__file__).read_text()
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
                for alias in statement.names:
                    found[alias.asname or alias.name] = (statement.module, alias.name)
    return found


def test_every_core_package_is_covered() -> None:
    assert set(PACKAGES) >= {
        "ekbatan.core",
        "ekbatan.core.config",
        "ekbatan.core.migrations",
        "ekbatan.core.outbox",
        "ekbatan.core.persistence",
        "ekbatan.core.sharding",
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_all_type_checking_imports_and_lazy_names_agree(package: str) -> None:
    module = importlib.import_module(package)
    declared = _type_checking_imports(package)
    assert sorted(declared) == sorted(module.__all__), "the TYPE_CHECKING imports and __all__ differ"
    for name, (home, attribute) in declared.items():
        assert getattr(module, name) is getattr(importlib.import_module(home), attribute), name
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    # Importing a submodule binds its name on the package, hiding any other object of that name.
    clashes = {n for n, v in vars(module).items() if n in submodules and not isinstance(v, ModuleType)}
    assert not clashes, "a submodule's name is bound to something else on its package"
    public = {n for n in dir(module) if not n.startswith("_")} - {"TYPE_CHECKING"} - submodules
    assert public == set(module.__all__), "the lazy names and __all__ differ"


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(
        AttributeError, match="'ekbatan.core.persistence' has no attribute 'ConectionProvider'"
    ):
        _ = ekbatan.core.persistence.ConectionProvider  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="ConectionProvider"):
        from ekbatan.core import ConectionProvider  # type: ignore[attr-defined]  # noqa: F401


def _loaded_by(statement: str) -> list[str]:
    probe = (
        f"{statement}\nimport sys\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' or "
        "m.startswith(('ekbatan.core.config', 'ekbatan.core.outbox', 'ekbatan.core.sharding'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip())


def test_the_liveness_check_alone_loads_no_settings_models() -> None:
    # A scheduler on a hand-built engine depends on SQLAlchemy only; its pool check must not
    # bring pydantic, the settings models or the outbox with it (~20 MB per process).
    assert _loaded_by("from ekbatan.core.persistence import install_idle_ping") == []
    assert _loaded_by("import ekbatan.core.persistence._liveness") == []


def test_a_settings_name_loads_what_it_needs() -> None:
    # The probe can see what it looks for: the same import by way of the settings does load pydantic.
    loaded = _loaded_by("from ekbatan.core import ConnectionProvider")
    assert "pydantic" in loaded and "ekbatan.core.config" in loaded


def test_subpackages_and_submodules_are_attributes_of_a_freshly_imported_package() -> None:
    # as when the packages imported everything eagerly: no import of the subpackage needed
    probe = (
        "import ekbatan.core\n"
        "print(ekbatan.core.persistence.ConnectionProvider.__name__, "
        "ekbatan.core.migrations._core_contributions.__name__, ekbatan.core._lazy_exports.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "ConnectionProvider",
        "ekbatan.core.migrations._core_contributions",
        "ekbatan.core._lazy_exports",
    ]


def test_a_submodule_that_fails_to_import_says_why_instead_of_missing(tmp_path, monkeypatch):
    package = tmp_path / "lazy_probe"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from ekbatan.core._lazy_exports import lazy_exports\n"
        "__getattr__, __dir__, __all__ = lazy_exports(__name__, {'lazy_probe.values': ('value',)})\n"
    )
    (package / "values.py").write_text("value = 42\n")
    (package / "broken.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe", raising=False)
    probe = importlib.import_module("lazy_probe")
    assert probe.value == 42
    assert probe.__all__ == ["value"]
    assert probe.values.__name__ == "lazy_probe.values"
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_here"):
        _ = probe.broken
    with pytest.raises(AttributeError, match="has no attribute 'absent'"):
        _ = probe.absent
    with pytest.raises(AttributeError, match="has no attribute 'values.deeper'"):
        getattr(probe, "values.deeper")
    for name in ("lazy_probe", "lazy_probe.values", "lazy_probe.broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
