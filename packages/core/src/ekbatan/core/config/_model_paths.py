"""Walking a pydantic model's field types along a key path (for env overrides and error paths)."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


@dataclass(frozen=True)
class Shape:
    """What sits at a path: a model, a list of something, a str-keyed dict of something, or a value."""

    kind: Literal["model", "list", "dict", "value"]
    model: type[BaseModel] | None = None
    item: Any = None


def shape_of(annotation: Any) -> Shape:
    origin = get_origin(annotation)
    if origin is Annotated:
        return shape_of(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        structured = [shape_of(a) for a in members]
        for shape in structured:
            if shape.kind != "value":
                return shape
        return Shape("value")
    if origin is list:
        return Shape("list", item=get_args(annotation)[0])
    if origin is dict:
        return Shape("dict", item=get_args(annotation)[1])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return Shape("model", model=annotation)
    return Shape("value")


def field_path(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """The part of a pydantic error ``loc`` that names keys, without union/validator tags."""
    kept: list[str | int] = []
    shape = Shape("model", model=model)
    for segment in loc:
        if shape.kind == "model" and isinstance(segment, str) and shape.model is not None:
            field = shape.model.model_fields.get(segment)
            kept.append(segment)
            if field is None:
                break
            shape = shape_of(field.annotation)
        elif (shape.kind == "list" and isinstance(segment, int)) or shape.kind == "dict":
            kept.append(segment)
            shape = shape_of(shape.item)
        else:
            break
    return tuple(kept)


def fields_at(model: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """Field names allowed at ``path`` (empty when the path does not end at a model)."""
    shape = Shape("model", model=model)
    for segment in path:
        if shape.kind == "model" and shape.model is not None and segment in shape.model.model_fields:
            shape = shape_of(shape.model.model_fields[str(segment)].annotation)
        elif shape.kind in ("list", "dict"):
            shape = shape_of(shape.item)
        else:
            return []
    return list(shape.model.model_fields) if shape.kind == "model" and shape.model is not None else []
