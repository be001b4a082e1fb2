"""``${VAR}`` and ``${VAR:default}`` in configuration values, resolved from the environment.

``$${`` stands for a literal ``${``. A variable that is unset and has no default is an error
naming the variable and the key; an empty variable stays empty (it is set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ekbatan.core.config._key_folding import Path

_TOKEN = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class PlaceholderError(ValueError):
    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(message)


def expand_placeholders(tree: Any, environ: Mapping[str, str], path: Path = ()) -> Any:
    """A copy of ``tree`` with every placeholder in string values replaced."""
    if isinstance(tree, Mapping):
        return {key: expand_placeholders(value, environ, (*path, str(key))) for key, value in tree.items()}
    if isinstance(tree, list):
        return [expand_placeholders(item, environ, (*path, i)) for i, item in enumerate(tree)]
    if isinstance(tree, str) and "${" in tree:
        return _expand(tree, environ, path)
    return tree


def _expand(text: str, environ: Mapping[str, str], path: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        if match.group(1) is None:
            raise PlaceholderError(
                path, "has an unterminated ${ placeholder; write ${NAME} or ${NAME:default}"
            )
        name, has_default, default = match.group(1).partition(":")
        name = name.strip()
        if not _NAME.match(name):
            raise PlaceholderError(
                path,
                f"has a placeholder with an invalid variable name {name!r}; write ${{NAME}} or ${{NAME:default}}",
            )
        if name in environ:
            return environ[name]
        if has_default:
            return default
        raise PlaceholderError(
            path,
            f"environment variable {name} is not set and ${{{name}}} has no default; "
            f"set {name} or write ${{{name}:default}}",
        )

    return _TOKEN.sub(replace, text)
