"""record_events: the same rows, written inside a transaction the caller owns."""

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from outbox_support import T0, SteppingClock
from sqlalchemy.orm import Session

from ekbatan.core import InvalidActionParamsError, record_events
from testsupport.sample_domain import Gadget, GadgetCreated, GadgetRecolored


def insert_gadget(connection, name="alpha"):
    gadget_id = uuid.uuid4()
    connection.execute(sa.insert(Gadget.__table__).values(id=gadget_id, name=name, color="red"))
    return gadget_id


def test_rows_written_in_a_transaction_the_caller_rolls_back_are_gone(shard_db):
    with shard_db.manager.primary.connect() as connection:
        transaction = connection.begin()
        gadget_id = insert_gadget(connection)
        recorded = record_events(
            connection,
            [GadgetCreated(model_id=gadget_id, model_name="Gadget", name="alpha", color="red")],
            action_name="ImportGadgets",
            params={"source": "csv"},
            namespace="test.recording",
            eventlog_schema=shard_db.eventlog,
        )
        assert connection.in_transaction() and transaction.is_active  # record_events never ends it
        assert len(recorded.row_ids) == 1
        transaction.rollback()

    assert shard_db.count(Gadget) == 0
    assert shard_db.event_rows() == []


def test_rows_written_in_a_committed_transaction_match_the_executors(shard_db):
    action_id = uuid.uuid4()
    with shard_db.manager.primary.connect() as connection, connection.begin():
        gadget_id = insert_gadget(connection)
        recorded = record_events(
            connection,
            [
                GadgetCreated(model_id=gadget_id, model_name="Gadget", name="alpha", color="red"),
                GadgetRecolored(model_id=gadget_id, model_name="Gadget", old_color="red", new_color="blue"),
            ],
            action_name="ImportGadgets",
            params={"source": "csv"},
            namespace="test.recording",
            eventlog_schema=shard_db.eventlog,
            action_id=action_id,
            clock=SteppingClock(T0),
        )

    rows = shard_db.event_rows()
    assert [r.event_type for r in rows] == ["GadgetCreated", "GadgetRecolored"]
    assert {r.id for r in rows} == set(recorded.row_ids)
    assert all(r.action_id == action_id == recorded.action_id for r in rows)
    assert all(r.started_date == r.completion_date == r.event_date == T0 for r in rows)
    assert all(r.namespace == "test.recording" and r.action_name == "ImportGadgets" for r in rows)
    assert all(r.action_params == {"source": "csv"} and r.delivered is False for r in rows)
    assert rows[1].payload == {
        "modelId": str(gadget_id),
        "modelName": "Gadget",
        "oldColor": "red",
        "newColor": "blue",
    }
    assert shard_db.count(Gadget) == 1


def test_a_session_is_accepted_and_its_rollback_discards_the_rows(shard_db):
    engine = shard_db.manager.primary.engine
    with Session(engine) as session:
        session.add(Gadget(id=uuid.uuid4(), name="orm", color="red"))
        record_events(
            session, [], action_name="Nothing", params={}, namespace="test", eventlog_schema=shard_db.eventlog
        )
        session.rollback()
    assert shard_db.event_rows() == [] and shard_db.count(Gadget) == 0

    started = T0 - timedelta(seconds=5)
    with Session(engine) as session:
        session.add(Gadget(id=uuid.uuid4(), name="orm", color="red"))
        recorded = record_events(
            session,
            [],
            action_name="Nothing",
            params={},
            namespace="test",
            eventlog_schema=shard_db.eventlog,
            started_date=started,
            completion_date=T0,
        )
        session.commit()
    assert recorded.sentinel
    [row] = shard_db.event_rows()
    assert (row.event_type, row.model_id, row.payload) == (None, None, None)
    assert (row.started_date, row.completion_date, row.event_date) == (started, T0, T0)
    assert shard_db.count(Gadget) == 1


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"namespace": "my-service"}, ValueError, "write 'my_service'"),
        ({"params": [1, 2]}, InvalidActionParamsError, "must serialize to a JSON object; got list"),
        ({"params": None}, InvalidActionParamsError, "got None"),
        ({"action_name": " "}, ValueError, "action_name must be a non-blank string"),
        ({"completion_date": T0.replace(tzinfo=None)}, ValueError, "naive"),
        ({"events": ["not an event"]}, ValueError, "events must be ModelEvent instances; got str"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(shard_db, arguments, error, message):
    call = {
        "events": [],
        "action_name": "ImportGadgets",
        "params": {},
        "namespace": "test",
        "eventlog_schema": shard_db.eventlog,
        **arguments,
    }
    events = call.pop("events")
    with (
        shard_db.manager.primary.connect() as connection,
        connection.begin(),
        pytest.raises(error, match=message),
    ):
        record_events(connection, events, **call)
    assert shard_db.event_rows() == []
