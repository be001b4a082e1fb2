"""The ```python blocks of the pages this package documents run as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[3] / "docs"
PAGES = ["configuration.md", "sharding.md", "tables.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples():
    for page in PAGES:
        for index, match in enumerate(_BLOCK.finditer((DOCS / page).read_text())):
            yield pytest.param(match.group(1), id=f"{page}#{index}")


@pytest.mark.parametrize("source", list(examples()))
def test_documented_example_runs(source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that name a relative file write it here
    exec(compile(source, "<docs example>", "exec"), {"__name__": "__docs__"})
