"""Environment variables that override any ``ekbatan.*`` key, list entries included.

``EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARY_CONFIG_PASSWORD`` overrides
``ekbatan.sharding.groups[0].members[0].configs.primary-config.password``. Names are matched
case-insensitively against the settings model, so a key may be written with underscores between
its words (``POLLING_INTERVAL``) or without (``POLLINGINTERVAL``); a number after a list key is
its index, and doubled underscores count as one. A new named pool may be introduced by the
environment alone: its name is the shortest prefix after ``CONFIGS_`` that leaves a valid pool
key (``..._CONFIGS_JOBS_CONFIG_URL`` → ``jobs_config.url``).

pydantic-settings' own ``env_nested_delimiter`` cannot address list entries, hence this source.
Variables whose first word is not a settings section (``EKBATAN_TEST_PG``) are left alone; one
that starts like a section but resolves to no key is an error naming the variable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from ekbatan.core.config._key_folding import Path
from ekbatan.core.config._model_paths import shape_of

PREFIX = "EKBATAN_"


class EnvironmentOverrideError(ValueError):
    def __init__(self, variable: str, message: str) -> None:
        self.variable = variable
        super().__init__(f"environment variable {variable}: {message}")


class EkbatanEnvironmentSource(PydanticBaseSettingsSource):
    """A pydantic-settings source: the file's (folded) tree with ``EKBATAN_…`` overrides applied."""

    def __init__(
        self, settings_cls: type[BaseSettings], base: Mapping[str, Any], environ: Mapping[str, str]
    ) -> None:
        super().__init__(settings_cls)
        self._base = base
        self._environ = environ
        self.applied: dict[str, Path] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # The whole tree is produced at once by __call__; per-field lookup is not used.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        tree: dict[str, Any] = copy.deepcopy(dict(self._base))
        for variable in sorted(self._environ):
            if not variable.upper().startswith(PREFIX):
                continue
            path = resolve_variable(self.settings_cls, variable, tree)
            if path is None:
                continue
            _assign(tree, path, self._environ[variable])
            self.applied[variable] = path
        return tree


def resolve_variable(model: type[BaseModel], variable: str, tree: Mapping[str, Any]) -> Path | None:
    """The settings path a variable names, ``None`` if it names no settings section at all."""
    tokens = [t for t in variable.upper()[len(PREFIX) :].split("_") if t]
    if not tokens or not any(_name_lengths(name, tokens, 0) for name in model.model_fields):
        return None
    candidates = _walk_model(model, tokens, 0, tree)
    if not candidates:
        raise EnvironmentOverrideError(
            variable,
            "names no settings key; write the key path in capitals with _ between parts and the list "
            "index after a list key, e.g. EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_PRIMARY_CONFIG_PASSWORD",
        )
    distinct = {tuple(c) for c in candidates}
    if len(distinct) > 1:
        shown = " or ".join(".".join(map(str, c)) for c in sorted(distinct, key=str))
        raise EnvironmentOverrideError(variable, f"is ambiguous: it could mean {shown}")
    return tuple(candidates[0])


def _name_lengths(name: str, tokens: list[str], start: int) -> list[int]:
    """How many tokens ``name`` (snake_case) consumes at ``start``: spelled out or squashed."""
    parts = name.upper().split("_")
    lengths = []
    if tokens[start : start + len(parts)] == parts:
        lengths.append(len(parts))
    if len(parts) > 1 and start < len(tokens) and tokens[start] == "".join(parts):
        lengths.append(1)
    return lengths


def _walk(annotation: Any, tokens: list[str], i: int, node: Any) -> list[list[str | int]]:
    shape = shape_of(annotation)
    if i == len(tokens):
        return [[]] if shape.kind == "value" else []
    if shape.kind == "model" and shape.model is not None:
        return _walk_model(shape.model, tokens, i, node)
    if shape.kind == "list":
        if not tokens[i].isdigit():
            return []
        index = int(tokens[i])
        child = node[index] if isinstance(node, list) and index < len(node) else None
        return [[index, *rest] for rest in _walk(shape.item, tokens, i + 1, child)]
    if shape.kind == "dict":
        found: list[list[str | int]] = []
        existing = node if isinstance(node, Mapping) else {}
        for key in existing:
            for length in _name_lengths(str(key), tokens, i):
                found += [[key, *rest] for rest in _walk(shape.item, tokens, i + length, existing[key])]
        if found:
            return found
        for end in range(i + 1, len(tokens)):  # a key the file does not have: shortest that fits
            rest_paths = _walk(shape.item, tokens, end, None)
            if rest_paths:
                key = "_".join(tokens[i:end]).lower()
                return [[key, *rest] for rest in rest_paths]
        return []
    return []


def _walk_model(model: type[BaseModel], tokens: list[str], i: int, node: Any) -> list[list[str | int]]:
    found: list[list[str | int]] = []
    mapping = node if isinstance(node, Mapping) else {}
    for name, field in model.model_fields.items():
        for length in _name_lengths(name, tokens, i):
            found += [
                [name, *rest] for rest in _walk(field.annotation, tokens, i + length, mapping.get(name))
            ]
    return found


def _assign(tree: dict[str, Any], path: Path, value: str) -> None:
    node: Any = tree
    for segment, following in zip(path, [*path[1:], None], strict=True):
        if following is None:
            node[segment] = value
            return
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(segment, int):
            while len(node) <= segment:
                node.append(None)
            if not isinstance(node[segment], dict | list):
                node[segment] = empty
            node = node[segment]
        else:
            if not isinstance(node.get(segment), dict | list):
                node[segment] = empty
            node = node[segment]
