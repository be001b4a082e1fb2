"""Serializers: ``PickleSerializer`` round-trips what JSON cannot hold, and only when chosen by
name; the default is ``JsonSerializer``, which never unpickles whatever the table holds."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from ekbatan.distributed_jobs.scheduler import (
    JsonSerializer,
    PickleSerializer,
    Scheduler,
    SchedulerClient,
    SerializationError,
    Tasks,
)

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)

UNPICKLED: list[str] = []


class Tripwire:
    """Unpickling this calls ``_tripped``: the proof that a serializer loaded a pickle."""

    def __reduce__(self):
        return (_tripped, ("loaded",))


def _tripped(value: str) -> str:
    UNPICKLED.append(value)
    return value


class NotJson:
    """A plain class: no dataclass, no to_json, no model_dump — only pickle can store it."""

    def __init__(self, items: set[int], when: datetime) -> None:
        self.items = items
        self.when = when

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NotJson) and (self.items, self.when) == (other.items, other.when)


@dataclass(frozen=True)
class Order:
    id: int
    total: Decimal


@pytest.mark.parametrize(
    "value",
    [NotJson({1, 2}, T0), Order(7, Decimal("9.95")), {"nested": [1, (2, 3)], "b": b"\x00\xff"}, 0, ""],
)
def test_pickle_round_trip(value):
    serializer = PickleSerializer()
    raw = serializer.serialize(value)
    assert isinstance(raw, bytes)
    assert serializer.deserialize(None, raw) == value
    assert serializer.deserialize(type(value), memoryview(raw)) == value  # drivers may hand back views


def test_pickle_stores_none_as_sql_null():
    assert PickleSerializer().serialize(None) is None
    assert PickleSerializer().deserialize(None, None) is None


def test_pickle_reports_bytes_that_do_not_unpickle():
    with pytest.raises(SerializationError, match="task data does not unpickle"):
        PickleSerializer().deserialize(None, b'{"json": true}')


def test_the_default_serializer_is_json_for_schedulers_and_clients(engine, built, dialect):
    task = Tasks.one_time("t").execute(lambda instance, ctx: None)
    assert type(SchedulerClient(engine, [task]).serializer) is JsonSerializer
    scheduler = Scheduler.create(engine, task).build()
    built.append(scheduler)
    assert type(scheduler.serializer) is JsonSerializer


def test_json_never_unpickles_a_pickle():
    UNPICKLED.clear()
    payload = pickle.dumps(Tripwire())
    assert PickleSerializer().deserialize(None, payload) == "loaded"  # the tripwire works
    assert UNPICKLED == ["loaded"]
    UNPICKLED.clear()
    for data_type in (None, dict, object):
        with pytest.raises(SerializationError, match="not UTF-8 JSON"):
            JsonSerializer().deserialize(data_type, payload)
    assert UNPICKLED == []


def test_pickled_data_round_trips_through_the_table(engine, dialect):
    task = Tasks.one_time("pickled", NotJson).execute(lambda instance, ctx: None)
    value = NotJson({3, 1}, T0)
    client = SchedulerClient(engine, [task], serializer=PickleSerializer())
    client.schedule(task.instance("1", value), T0)
    assert client.get_scheduled_execution(("pickled", "1")).data == value
    with pytest.raises(SerializationError, match="cannot encode NotJson as JSON"):
        SchedulerClient(engine, [task]).schedule(task.instance("2", value), T0)
