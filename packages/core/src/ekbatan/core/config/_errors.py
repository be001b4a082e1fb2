"""``SettingsError``: every problem in a configuration, each named by its key path.

Messages quote keys as the user spelled them and never echo a value that could be a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from ekbatan.core.config._key_folding import Path, kebab_spelling
from ekbatan.core.config._model_paths import field_path, fields_at


class SettingsError(ValueError):
    """Invalid Ekbatan settings. ``problems`` holds one ``(key path, message)`` pair per problem."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {path}: {message}" for path, message in problems)
        super().__init__(f"invalid Ekbatan settings in {source}:\n{lines}")


def render_path(path: Path, spellings: Mapping[Path, str] | None = None, root: str = "ekbatan") -> str:
    """``("sharding", "groups", 0, "configs")`` → ``ekbatan.sharding.groups[0].configs``."""
    spellings = spellings or {}
    text = root
    for depth, segment in enumerate(path):
        if isinstance(segment, int):
            text += f"[{segment}]"
        else:
            text += "." + spellings.get(path[: depth + 1], kebab_spelling(segment))
    return text


def problems_from_validation_error(
    error: ValidationError,
    model: type[BaseModel],
    spellings: Mapping[Path, str] | None = None,
    root: str = "ekbatan",
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for detail in error.errors(include_url=False, include_input=False):
        path = field_path(model, tuple(detail["loc"]))
        kind = detail["type"]
        if kind == "extra_forbidden":
            allowed = [kebab_spelling(name) for name in fields_at(model, path[:-1])]
            close = difflib.get_close_matches(kebab_spelling(str(path[-1])), allowed, n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else (f"; allowed here: {', '.join(allowed)}" if allowed else "")
            )
            message = f"unknown key{hint}"
        elif kind == "missing":
            message = "is required"
        elif kind in ("value_error", "assertion_error") and "error" in detail.get("ctx", {}):
            message = str(detail["ctx"]["error"])
        else:
            message = detail["msg"]
        problems.append((render_path(path, spellings, root), message))
    return problems
