"""Action parameters, as stored in ``action_params``: always a JSON object.

Params may be a pydantic model, a dataclass or a mapping, nested freely; values are rendered
by pydantic's JSON mode (UUID and datetime as ISO text, ``Decimal`` as text, enums as their
values). Field names of dataclasses and of :class:`ActionParams` models are written in
camelCase, as Ekbatan for Java writes record components; other pydantic models follow their own
aliases, and mapping keys are kept as given.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ekbatan.core.outbox._errors import InvalidActionParamsError


class ActionParams(BaseModel):
    """A convenient base for params: immutable, camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


def params_to_json_object(params: Any, *, action_name: str = "the action") -> dict[str, Any]:
    """``params`` as a JSON-compatible ``dict``; anything that is not a JSON object is refused."""
    if params is None or not (
        isinstance(params, BaseModel | Mapping)
        or (dataclasses.is_dataclass(params) and not isinstance(params, type))
    ):
        shown = "None" if params is None else f"{type(params).__name__} {params!r:.80}"
        raise InvalidActionParamsError(
            f"action params of {action_name} must serialize to a JSON object; got {shown}. Pass a "
            "pydantic model (e.g. an ActionParams subclass), a dataclass or a dict "
            "(an empty dict {} for an action without parameters)"
        )
    try:
        rendered = _jsonable(params)
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise InvalidActionParamsError(
            f"action params of {action_name} ({type(params).__name__}) cannot be serialized to JSON: {error}"
        ) from error
    if not isinstance(rendered, dict):
        raise InvalidActionParamsError(
            f"action params of {action_name} must serialize to a JSON object; "
            f"{type(params).__name__} serialized to {type(rendered).__name__}"
        )
    return rendered


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {to_camel(f.name): _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return to_jsonable_python(value, by_alias=True)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    rendered = to_jsonable_python(key)
    if isinstance(rendered, str):
        return rendered
    if isinstance(rendered, bool | int | float) or rendered is None:
        return json.dumps(rendered)
    raise TypeError(f"mapping key {key!r} cannot be a JSON object key")
