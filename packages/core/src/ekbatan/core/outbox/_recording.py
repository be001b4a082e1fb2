"""Writing an action's rows to ``eventlog.events`` inside the caller's transaction.

:func:`record_events` is the low-level path for applications that own their transaction (a
FastAPI request handler with its own ``Session``, a Flask view with ``engine.begin()``). The
:class:`~ekbatan.core.outbox.ActionExecutor` writes its rows through the same function, so both
paths store exactly the same thing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ekbatan.core.migrations._eventlog_ddl import DEFAULT_EVENTLOG_SCHEMA
from ekbatan.core.migrations._eventlog_metadata import eventlog_tables
from ekbatan.core.outbox._clock import Clock, UtcClock, utc_now
from ekbatan.core.outbox._codec import EventCodec, default_codec
from ekbatan.core.outbox._events import ModelEvent
from ekbatan.core.outbox._namespaces import validate_namespace
from ekbatan.core.outbox._wakeups import events_channel, notify
from ekbatan.core.persistence._dialect_names import DialectName

MAX_NAME_LENGTH = 255


@dataclass(frozen=True)
class RecordedAction:
    """The rows one action wrote on one database."""

    action_id: uuid.UUID
    row_ids: tuple[uuid.UUID, ...]
    event_types: tuple[str | None, ...]
    started_date: datetime
    completion_date: datetime

    @property
    def sentinel(self) -> bool:
        """True when the action had no event here and one sentinel row was written instead."""
        return self.event_types == (None,)


@functools.lru_cache(maxsize=64)
def events_table(dialect: DialectName, schema: str) -> sa.Table:
    """The ``events`` table of ``schema`` for ``dialect`` (built once per pair)."""
    return eventlog_tables(dialect, schema).events


def dialect_of(connection: sa.Connection) -> DialectName:
    """The dialect the eventlog DDL was written for: the URL's, as ``migrate`` chose it."""
    return DialectName(connection.dialect.name)


def record_events(
    connection_or_session: sa.Connection | Session,
    events: Iterable[ModelEvent],
    *,
    action_name: str,
    params: Any,
    namespace: str,
    eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA,
    action_id: uuid.UUID | None = None,
    started_date: datetime | None = None,
    completion_date: datetime | None = None,
    clock: Clock | None = None,
    codec: EventCodec | None = None,
) -> RecordedAction:
    """Write one ``eventlog.events`` row per event (or one sentinel row) in the caller's transaction.

    Nothing is committed or rolled back here: the rows become visible when the caller commits
    and vanish if it rolls back, together with its own changes. With a ``Session`` the rows go
    through ``session.connection()``; with a ``Connection`` SQLAlchemy begins a transaction if
    none is open yet ("commit as you go"), which the caller then commits.

    ``completion_date`` (also each row's ``event_date``) defaults to ``clock.now()`` and
    ``started_date`` to ``completion_date``; ``action_id`` defaults to a new UUID v4.
    """
    namespace = validate_namespace(namespace)
    _check_name(action_name, "action_name")
    codec = default_codec if codec is None else codec
    params_json = codec.encode_params(params, action_name=action_name)
    completion = _aware(completion_date, "completion_date") or utc_now(clock or UtcClock())
    started = _aware(started_date, "started_date") or completion
    connection = (
        connection_or_session.connection()
        if isinstance(connection_or_session, Session)
        else connection_or_session
    )
    return write_action_rows(
        connection,
        list(events),
        namespace=namespace,
        action_id=action_id or uuid.uuid4(),
        action_name=action_name,
        params_json=params_json,
        started_date=started,
        completion_date=completion,
        eventlog_schema=eventlog_schema,
        codec=codec,
        dialect=dialect_of(connection),
    )


def write_action_rows(
    connection: sa.Connection,
    events: Sequence[ModelEvent],
    *,
    namespace: str,
    action_id: uuid.UUID,
    action_name: str,
    params_json: dict[str, Any],
    started_date: datetime,
    completion_date: datetime,
    eventlog_schema: str,
    codec: EventCodec,
    dialect: DialectName,
) -> RecordedAction:
    """Insert the rows (already validated inputs) with one multi-row ``INSERT``."""
    common = {
        "namespace": namespace,
        "action_id": action_id,
        "action_name": action_name,
        "action_params": params_json,
        "started_date": started_date,
        "completion_date": completion_date,
        "event_date": completion_date,
        "delivered": False,
    }
    rows: list[dict[str, Any]] = []
    for event in events:
        encoded = codec.encode(event)
        if encoded.model_id is not None:
            _check_name(encoded.model_id, "model_id")
        if encoded.model_type is not None:
            _check_name(encoded.model_type, "model_name")
        rows.append(
            {
                **common,
                "id": uuid.uuid4(),
                "model_id": encoded.model_id,
                "model_type": encoded.model_type,
                "event_type": encoded.event_type,
                "payload": encoded.payload,
            }
        )
    if not rows:
        # No event: one sentinel row still records that the action ran and committed. It has
        # no "payload" key, so the column is SQL NULL (binding None would store JSON null).
        rows.append({**common, "id": uuid.uuid4(), "model_id": None, "model_type": None, "event_type": None})
    connection.execute(events_table(dialect, eventlog_schema).insert(), rows)
    if events and dialect is DialectName.POSTGRESQL:
        notify(connection, events_channel(eventlog_schema))
    return RecordedAction(
        action_id=action_id,
        row_ids=tuple(r["id"] for r in rows),
        event_types=tuple(r["event_type"] for r in rows),
        started_date=started_date,
        completion_date=completion_date,
    )


def _check_name(value: object, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-blank string; got {value!r}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(
            f"{what} {value[:40]!r}… is longer than the {MAX_NAME_LENGTH} characters its column holds"
        )


def _aware(value: datetime | None, what: str) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} {value.isoformat()} is naive; pass an aware datetime, e.g. with tzinfo=UTC")
    return value
