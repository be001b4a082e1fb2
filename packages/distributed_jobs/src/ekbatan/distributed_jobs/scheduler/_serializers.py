"""How task data becomes the bytes in ``task_data`` and back.

JSON is the default: readable by any language and never executes code when it loads. Pickle
exists for those who ask for it by name — unpickling runs code chosen by whoever could write
the table.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import pickle
import types
import typing
import uuid
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from ekbatan.distributed_jobs.scheduler._errors import SerializationError


@runtime_checkable
class Serializer(Protocol):
    def serialize(self, data: object) -> bytes | None:
        """Encode ``data``; ``None`` may be returned to store SQL NULL."""
        ...

    def deserialize(self, data_type: Any, raw: bytes | None) -> object:
        """Decode ``raw`` into ``data_type`` (``None``: whatever the encoding naturally gives)."""
        ...


class JsonSerializer:
    """UTF-8 JSON. Understands dicts, lists, scalars, dataclasses, enums, datetimes, UUIDs,
    Decimals and pydantic models (anything with ``model_dump``/``model_validate``), and objects
    offering ``to_json()`` / ``from_json()`` (the persistent schedules do).

    ``None`` is stored as the JSON text ``null``, as db-scheduler's JSON serializers (Gson,
    Jackson) write it: Java fails on a SQL NULL it reads through them. SQL NULL (what Java's
    default serializer writes for no data) still reads back as None.
    """

    def serialize(self, data: object) -> bytes | None:
        if data is None:
            return b"null"
        try:
            return json.dumps(to_jsonable(data), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"cannot encode {type(data).__name__} as JSON: {exc}; use dicts, lists, scalars, "
                "dataclasses or pydantic models, or configure another serializer"
            ) from exc

    def deserialize(self, data_type: Any, raw: bytes | None) -> object:
        if raw is None:
            return None
        try:
            value = json.loads(bytes(raw).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            hint = " (it looks like Java serialization)" if bytes(raw[:2]) == b"\xac\xed" else ""
            raise SerializationError(f"task data is not UTF-8 JSON{hint}: {exc}") from exc
        if value is None or data_type is None:
            return value
        try:
            return from_jsonable(data_type, value)
        except (TypeError, ValueError, KeyError) as exc:
            name = getattr(data_type, "__name__", repr(data_type))
            raise SerializationError(f"task data does not decode as {name}: {exc}") from exc

    def __repr__(self) -> str:
        return "JsonSerializer()"


class PickleSerializer:
    """Python pickle. **Opt-in only**: loading a pickle executes code from the database."""

    def serialize(self, data: object) -> bytes | None:
        return None if data is None else pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)

    def deserialize(self, data_type: Any, raw: bytes | None) -> object:
        if raw is None:
            return None
        try:
            return pickle.loads(bytes(raw))
        except Exception as exc:
            raise SerializationError(f"task data does not unpickle: {exc}") from exc

    def __repr__(self) -> str:
        return "PickleSerializer()"


def to_jsonable(value: object) -> Any:
    """Turn ``value`` into plain JSON types."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return value.model_dump(mode="json")
    if hasattr(value, "to_json") and callable(value.to_json):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def from_jsonable(data_type: Any, value: Any) -> Any:
    """Rebuild a ``data_type`` from plain JSON ``value`` (the inverse of :func:`to_jsonable`)."""
    if data_type is Any or data_type is object:
        return value
    origin = typing.get_origin(data_type)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(data_type) if a is not type(None)]
        if value is None:
            return None
        last_error: Exception | None = None
        for arg in args:
            try:
                return from_jsonable(arg, value)
            except (TypeError, ValueError, KeyError) as exc:
                last_error = exc
        raise ValueError(f"{value!r} matches none of {args}: {last_error}")
    if origin in (list, set, frozenset, tuple) or data_type in (list, set, frozenset, tuple):
        if not isinstance(value, list):
            raise TypeError(f"expected a JSON array, got {type(value).__name__}")
        element_types = typing.get_args(data_type)
        items = (
            [from_jsonable(element_types[0], v) for v in value]
            if element_types and element_types[-1] is not Ellipsis
            else value
        )
        if element_types and origin is tuple and (len(element_types) < 2 or element_types[1] is not Ellipsis):
            items = [from_jsonable(a, v) for a, v in zip(element_types, value, strict=True)]
        return (origin or data_type)(items)
    if origin is dict or data_type is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object, got {type(value).__name__}")
        key_and_value = typing.get_args(data_type)
        return (
            {k: from_jsonable(key_and_value[1], v) for k, v in value.items()}
            if key_and_value
            else dict(value)
        )
    if not isinstance(data_type, type):
        return value
    if value is None:
        return None
    if hasattr(data_type, "model_validate"):
        return data_type.model_validate(value)
    if hasattr(data_type, "from_json") and callable(data_type.from_json):
        return data_type.from_json(value)
    if dataclasses.is_dataclass(data_type):
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object for {data_type.__name__}, got {type(value).__name__}")
        hints = typing.get_type_hints(data_type)
        kwargs = {
            f.name: from_jsonable(hints.get(f.name, Any), value[f.name])
            for f in dataclasses.fields(data_type)
            if f.init and f.name in value
        }
        return data_type(**kwargs)
    if issubclass(data_type, enum.Enum):
        return data_type(value)
    if data_type is dt.datetime:
        return dt.datetime.fromisoformat(value)
    if data_type is dt.date:
        return dt.date.fromisoformat(value)
    if data_type is dt.time:
        return dt.time.fromisoformat(value)
    if data_type is dt.timedelta:
        return dt.timedelta(seconds=value)
    if data_type in (uuid.UUID, Decimal):
        return data_type(value)
    if data_type is bytes:
        return base64.b64decode(value)
    if data_type is float and isinstance(value, int):
        return float(value)
    if data_type in (bool, int, float, str):
        if not isinstance(value, data_type) or (data_type is int and isinstance(value, bool)):
            raise TypeError(f"expected {data_type.__name__}, got {type(value).__name__}")
        return value
    raise TypeError(f"do not know how to decode {data_type!r} from JSON")
