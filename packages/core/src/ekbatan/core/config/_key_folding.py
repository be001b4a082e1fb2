"""One spelling for every key: kebab-case and camelCase (mixed freely) fold to snake_case.

The fold goes through camelCase first, as Spring's relaxed binding does, so both spellings of a
key land on the same name even when digits are involved: ``primary-eu-west-1`` and
``primaryEuWest1`` both become ``primary_eu_west1``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, model_validator

_KEBAB_BOUNDARY = re.compile(r"-+([A-Za-z0-9])")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

Path = tuple[str | int, ...]


def fold_key(key: str) -> str:
    """``jobs-config`` / ``jobsConfig`` / ``jobs_config`` → ``jobs_config``."""
    camel = _KEBAB_BOUNDARY.sub(lambda m: m.group(1).upper(), key.strip())
    return _CAMEL_BOUNDARY.sub("_", camel).lower()


def kebab_spelling(key: str) -> str:
    """The documentation spelling of a canonical key: ``jobs_config`` → ``jobs-config``."""
    return key.replace("_", "-")


class DuplicateSpellingError(ValueError):
    def __init__(self, path: Path, first: str, second: str) -> None:
        self.path = path
        self.first = first
        self.second = second
        super().__init__(f"{first!r} and {second!r} are two spellings of the same key; keep one")


def fold_tree(tree: Any, *, path: Path = ()) -> tuple[Any, dict[Path, str]]:
    """Fold every mapping key in ``tree``; return the folded tree and the original spellings.

    The spellings map each folded path to the key as the user wrote it, so error messages can
    quote the user's own spelling.
    """
    spellings: dict[Path, str] = {}
    return _fold(tree, path, spellings), spellings


def _fold(node: Any, path: Path, spellings: dict[Path, str]) -> Any:
    if isinstance(node, Mapping):
        folded: dict[str, Any] = {}
        for raw_key, value in node.items():
            original = str(raw_key)
            key = fold_key(original)
            child = (*path, key)
            if key in folded:
                raise DuplicateSpellingError(path, spellings[child], original)
            spellings[child] = original
            folded[key] = _fold(value, child, spellings)
        return folded
    if isinstance(node, list):
        return [_fold(item, (*path, index), spellings) for index, item in enumerate(node)]
    return node


def fold_mapping_keys(value: Any) -> Any:
    """One level of folding, for models validated straight from a mapping written in any spelling."""
    if not isinstance(value, Mapping):
        return value
    folded: dict[str, Any] = {}
    originals: dict[str, str] = {}
    for raw_key, item in value.items():
        key = fold_key(str(raw_key))
        if key in folded:
            raise ValueError(
                f"{originals[key]!r} and {raw_key!r} are two spellings of the same key; keep one"
            )
        folded[key] = item
        originals[key] = str(raw_key)
    return folded


class KeyFoldingModel(BaseModel):
    """A model that accepts its keys in snake_case, kebab-case or camelCase."""

    @model_validator(mode="before")
    @classmethod
    def _fold_keys(cls, value: Any) -> Any:
        return fold_mapping_keys(value)
