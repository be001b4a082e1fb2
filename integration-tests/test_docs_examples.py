"""Every ```python block in docs/**/*.md runs, on its own, in a fresh namespace and directory."""

from __future__ import annotations

import re
import sys
import tempfile
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list:
    params = []
    for page in sorted(DOCS.rglob("*.md")):
        name = page.relative_to(DOCS).as_posix()
        stem = name.removesuffix(".md").replace("/", "-")
        for number, match in enumerate(BLOCK.finditer(page.read_text("utf-8")), start=1):
            line = page.read_text("utf-8")[: match.start()].count("\n") + 2
            params.append(pytest.param(name, match.group(1), id=f"{stem}-{number}-line{line}"))
    return params


@pytest.mark.parametrize(("page", "code"), _blocks())
def test_docs_example_runs(page, code, tmp_path, monkeypatch):
    workdir, system_temp = tmp_path / "cwd", tmp_path / "tmp"
    workdir.mkdir()
    system_temp.mkdir()
    monkeypatch.chdir(workdir)
    # An example that creates a temporary directory must remove it: readers copy them.
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    # A real module, importable while it runs, as a script's is: an example may pass itself to
    # scan() (packages=[__name__]) like an application's module does.
    module = types.ModuleType(f"docs_{Path(page).stem}")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, f"docs/{page}", "exec", dont_inherit=True), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert not list(system_temp.iterdir()), f"docs/{page} left temporary files behind"


def test_every_docs_page_has_runnable_examples_or_says_why():
    pages = sorted(DOCS.rglob("*.md"))
    assert pages, "docs/ has no pages"
    for page in pages:
        text = page.read_text("utf-8")
        assert BLOCK.search(text) or "<!-- no python examples:" in text, (
            f"{page.name} has no ```python example; add one (it will be executed) or a comment "
            "'<!-- no python examples: <reason> -->'"
        )
