"""ActionExecutor on one shard: the eventlog rows an action writes (one per event, or one sentinel
row), rollback, routing, reading through the session."""

import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import sqlalchemy as sa
from outbox_support import T0, SteppingClock, registry_of
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from sqlalchemy.exc import IntegrityError

from ekbatan.core import (
    Action,
    ActionExecutor,
    ActionParams,
    ConnectionProvider,
    DatabaseRegistry,
    InvalidActionParamsError,
    ShardedUUID,
    ShardIdentifier,
    TransactionManager,
    action,
    current_plan,
)
from ekbatan.core.migrations import eventlog_table_name
from ekbatan.core.outbox import (
    ActionNotRegisteredError,
    NoActionRunningError,
    UnexpectedRowCountError,
    default_codec,
    is_action,
)
from testsupport.sample_domain import (
    Dimensions,
    Gadget,
    GadgetCreated,
    GadgetPriced,
    GadgetRecolored,
    GadgetRemoved,
    Memo,
    MemoWritten,
    Shade,
)

GLOBAL = ShardIdentifier(0, 0)


class CreateGadgetParams(ActionParams):
    name: str
    color: str
    shard: ShardIdentifier = ShardIdentifier.DEFAULT


@action
class CreateGadget(Action[CreateGadgetParams, uuid.UUID]):
    def perform(self, principal, params):
        gadget = Gadget(id=ShardedUUID.generate(params.shard), name=params.name, color=params.color)
        self.plan.add(gadget, GadgetCreated(name=params.name, color=params.color))
        return gadget.id


class CreateBatch(Action[dict, list]):
    """Two events per gadget, plus one event about no model at all."""

    def perform(self, principal, params):
        ids = []
        for name in params["names"]:
            gadget = Gadget(id=ShardedUUID.generate(), name=name, color="red")
            self.plan.add(
                gadget,
                GadgetCreated(name=name, color="red"),
                GadgetRecolored(old_color="none", new_color="red"),
            )
            ids.append(gadget.id)
        self.plan.emit(MemoWritten(text="batch done"))
        return ids


class DoNothing(Action[dict, str]):
    def perform(self, principal, params):
        return f"nothing for {principal}"


class RecolorParams(ActionParams):
    gadget_id: uuid.UUID
    color: str


class RecolorGadget(Action[RecolorParams, str]):
    """Reads through the plan's session, changes the loaded object, plans the update with an event."""

    def perform(self, principal, params):
        gadget = self.plan.session().get(Gadget, params.gadget_id)
        old = gadget.color
        gadget.color = params.color
        self.plan.update(gadget, GadgetRecolored(old_color=old, new_color=params.color))
        return old


class RecolorQuietly(Action[RecolorParams, None]):
    def perform(self, principal, params):
        gadget = self.plan.session().get(Gadget, params.gadget_id)
        gadget.color = params.color
        self.plan.update(gadget)


class RemoveGadget(Action[RecolorParams, None]):
    def perform(self, principal, params):
        gadget = self.plan.session().get(Gadget, params.gadget_id)
        self.plan.delete(gadget, GadgetRemoved(reason=f"replaced by {params.color}"))


class WriteMemo(Action[dict, int]):
    def perform(self, principal, params):
        memo = self.plan.add(Memo(text=params["text"]), MemoWritten(text=params["text"]))
        self.plan.execute(sa.insert(Memo.__table__).values(text="written by a Core statement"))
        self._memo = memo
        return 0


def test_one_event_writes_one_row_carrying_every_column(shard_db):
    clock = SteppingClock(T0)
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox", clock=clock)

    outcome = executor.execute_with_outcome(
        CreateGadget(), CreateGadgetParams(name="alpha", color="red"), principal="ann"
    )

    [row] = shard_db.event_rows()
    assert row.id == outcome.records[GLOBAL].row_ids[0]
    assert row.namespace == "test.outbox"
    assert row.action_id == outcome.action_id
    assert row.action_name == "CreateGadget"
    assert row.action_params == {"name": "alpha", "color": "red", "shard": {"group": 0, "member": 0}}
    assert row.started_date == T0
    assert row.completion_date == T0 + timedelta(seconds=1)
    assert row.event_date == row.completion_date
    assert row.model_id == str(outcome.result)
    assert row.model_type == "Gadget"
    assert row.event_type == "GadgetCreated"
    assert row.payload == {
        "modelId": str(outcome.result),
        "modelName": "Gadget",
        "name": "alpha",
        "color": "red",
    }
    assert row.delivered is False
    assert [(g.id, g.name, g.color) for g in shard_db.gadgets()] == [(outcome.result, "alpha", "red")]
    assert outcome.started_date == T0 and outcome.completion_date == T0 + timedelta(seconds=1)


def test_several_events_share_the_action_id_and_get_distinct_row_ids(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox", clock=SteppingClock(T0))

    outcome = executor.execute_with_outcome(CreateBatch(), {"names": ["a", "b", "c"]})

    rows = shard_db.event_rows(action_id=outcome.action_id)
    assert len(rows) == 7 == len(shard_db.event_rows())
    assert {r.action_id for r in rows} == {outcome.action_id}
    assert len({r.id for r in rows}) == 7
    assert sorted(r.event_type for r in rows) == ["GadgetCreated"] * 3 + ["GadgetRecolored"] * 3 + [
        "MemoWritten"
    ]
    assert {r.model_id for r in rows if r.event_type != "MemoWritten"} == {str(i) for i in outcome.result}
    [memo] = [r for r in rows if r.event_type == "MemoWritten"]
    assert (memo.model_id, memo.model_type) == (None, None)
    assert memo.payload == {"modelId": None, "modelName": None, "text": "batch done"}
    assert all(r.event_date == r.completion_date == T0 + timedelta(seconds=1) for r in rows)
    assert all(r.delivered is False and r.action_params == {"names": ["a", "b", "c"]} for r in rows)
    assert shard_db.count(Gadget) == 3


def test_an_action_without_events_writes_one_sentinel_row(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox", clock=SteppingClock(T0))

    outcome = executor.execute_with_outcome(DoNothing(), {}, principal="ann")

    assert outcome.result == "nothing for ann"
    assert outcome.records[GLOBAL].sentinel
    [row] = shard_db.event_rows()
    assert row.id == outcome.records[GLOBAL].row_ids[0]
    assert (row.model_id, row.model_type, row.event_type, row.payload) == (None, None, None, None)
    assert (row.namespace, row.action_name, row.action_params) == ("test.outbox", "DoNothing", {})
    assert row.event_date == row.completion_date == T0 + timedelta(seconds=1)
    assert row.delivered is False
    events = shard_db.events
    with shard_db.manager.primary.connect() as connection:
        # SQL NULL, not the JSON literal null: consumers filter on "payload IS NULL" too.
        assert (
            connection.execute(
                sa.select(sa.func.count()).select_from(events).where(events.c.payload.is_(None))
            ).scalar_one()
            == 1
        )


def test_changes_without_events_still_write_a_sentinel_row(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    gadget_id = executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))

    executor.execute(RecolorQuietly(), RecolorParams(gadget_id=gadget_id, color="blue"))

    assert [g.color for g in shard_db.gadgets()] == ["blue"]
    [sentinel] = shard_db.event_rows(action_name="RecolorQuietly")
    assert sentinel.event_type is None
    assert sentinel.action_params == {"gadgetId": str(gadget_id), "color": "blue"}


def test_an_action_reads_through_the_session_it_writes_with(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    gadget_id = executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))

    old = executor.execute(RecolorGadget(), RecolorParams(gadget_id=gadget_id, color="blue"))

    assert old == "red"
    assert [g.color for g in shard_db.gadgets()] == ["blue"]
    [row] = shard_db.event_rows(event_type="GadgetRecolored")
    assert (row.model_id, row.model_type) == (str(gadget_id), "Gadget")
    assert row.payload == {
        "modelId": str(gadget_id),
        "modelName": "Gadget",
        "oldColor": "red",
        "newColor": "blue",
    }


def test_the_plan_session_is_the_transaction_managers_current_connection(shard_db):
    manager = shard_db.manager
    seen = {}

    class Inspect(Action[dict, None]):
        def perform(self, principal, params):
            connection = self.plan.connection()
            seen["same"] = manager.current_connection() is connection
            seen["plan"] = current_plan() is self.plan
            seen["in_transaction"] = connection.in_transaction()

    ActionExecutor(registry_of(shard_db), namespace="test.outbox").execute(Inspect(), {})

    assert seen == {"same": True, "plan": True, "in_transaction": True}
    assert manager.current_connection() is None


def test_database_generated_keys_fill_the_attached_events_model_id(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")

    executor.execute(WriteMemo(), {"text": "hello"})

    with shard_db.manager.primary.connect() as connection:
        memos = connection.execute(sa.select(Memo.__table__).order_by(Memo.id)).all()
    assert [m.text for m in memos] == ["hello", "written by a Core statement"]
    [row] = shard_db.event_rows(event_type="MemoWritten")
    assert (row.model_id, row.model_type) == (str(memos[0].id), "Memo")
    assert row.payload["modelId"] == str(memos[0].id)


def test_deleting_with_an_event_identifies_the_deleted_model(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    gadget_id = executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))

    executor.execute(RemoveGadget(), RecolorParams(gadget_id=gadget_id, color="green"))

    assert shard_db.count(Gadget) == 0
    [row] = shard_db.event_rows(event_type="GadgetRemoved")
    assert (row.model_id, row.model_type) == (str(gadget_id), "Gadget")
    assert row.payload["reason"] == "replaced by green"


def test_a_failure_in_perform_leaves_neither_business_rows_nor_events(shard_db):
    class CreateThenFail(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(
                Gadget(id=ShardedUUID.generate(), name="ghost", color="grey"),
                GadgetCreated(name="ghost", color="grey"),
            )
            self.plan.session().add(Memo(text="direct write"))
            self.plan.session().flush()  # really sent to the database, inside the transaction
            raise RuntimeError("perform failed")

    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    with pytest.raises(RuntimeError, match="perform failed"):
        executor.execute(CreateThenFail(), {})

    assert shard_db.count(Gadget) == 0
    assert shard_db.count(Memo) == 0
    assert shard_db.event_rows() == []


def test_a_failing_write_rolls_back_the_earlier_writes_of_the_action(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    existing = executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))

    class CreateTwoOneDuplicate(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(
                Gadget(id=ShardedUUID.generate(), name="new", color="red"),
                GadgetCreated(name="new", color="red"),
            )
            self.plan.execute(sa.insert(Gadget.__table__).values(id=existing, name="dup", color="red"))

    with pytest.raises(IntegrityError):
        executor.execute(CreateTwoOneDuplicate(), {})

    assert [g.name for g in shard_db.gadgets()] == ["alpha"]
    assert shard_db.event_rows(action_name="CreateTwoOneDuplicate") == []


def test_a_failing_flush_rolls_back_once_and_keeps_the_connection(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    existing = executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))

    class AddDuplicate(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(
                Gadget(id=existing, name="dup", color="red"), GadgetCreated(name="dup", color="red")
            )

    invalidated = []
    sa.event.listen(shard_db.manager.primary.engine, "invalidate", lambda *args: invalidated.append(args))
    # Under the suite's "error" filter a second rollback's warning gets the connection evicted...
    with pytest.raises(IntegrityError):
        executor.execute(AddDuplicate(), {})
    # ...and under "always" it shows as the warning itself.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(IntegrityError):
            executor.execute(AddDuplicate(), {})

    assert invalidated == []
    assert [str(w.message) for w in seen] == []
    assert [g.name for g in shard_db.gadgets()] == ["alpha"]


def test_a_failing_event_insert_rolls_back_the_business_rows(shard_db):
    # A shard whose eventlog was never migrated: the business INSERT succeeds, the event INSERT fails.
    provider = ConnectionProvider.from_url(shard_db.database.url)
    broken = TransactionManager(provider, shard=GLOBAL, eventlog_schema="el_never_migrated")
    executor = ActionExecutor(DatabaseRegistry([broken]), namespace="test.outbox")
    try:
        with pytest.raises(sa.exc.DatabaseError):
            executor.execute(CreateGadget(), CreateGadgetParams(name="alpha", color="red"))
    finally:
        broken.close()

    assert shard_db.count(Gadget) == 0


def test_an_unexpected_rowcount_rolls_the_action_back(shard_db):
    class RecolorMissing(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(Memo(text="kept only if the update matches"))
            gadgets = Gadget.__table__
            self.plan.execute(
                sa.update(gadgets).where(gadgets.c.id == uuid.uuid4()).values(color="blue"),
                expected_rowcount=1,
            )

    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    with pytest.raises(UnexpectedRowCountError, match="expected 1 row"):
        executor.execute(RecolorMissing(), {})

    assert shard_db.count(Memo) == 0
    assert shard_db.event_rows() == []


def test_writes_made_directly_through_the_session_are_kept_with_a_sentinel(shard_db):
    class DirectWrite(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.session().add(Memo(text="not planned, still written"))

    ActionExecutor(registry_of(shard_db), namespace="test.outbox").execute(DirectWrite(), {})

    assert shard_db.count(Memo) == 1
    [row] = shard_db.event_rows()
    assert (row.action_name, row.event_type) == ("DirectWrite", None)


def test_time_columns_are_stored_as_naive_utc_whatever_the_clocks_zone(shard_db):
    tehran = timezone(timedelta(hours=3, minutes=30))
    clock = SteppingClock(datetime(2026, 3, 1, 13, 0, 0, 500000, tzinfo=tehran), timedelta(minutes=1))
    ActionExecutor(registry_of(shard_db), namespace="test.outbox", clock=clock).execute(DoNothing(), {})

    events_name = eventlog_table_name(shard_db.manager.dialect, "events", shard_db.eventlog)
    with shard_db.manager.primary.connect() as connection:
        raw = connection.exec_driver_sql(
            f"SELECT started_date, completion_date, event_date FROM {events_name}"
        ).one()
    stored = [datetime.fromisoformat(v) if isinstance(v, str) else v for v in raw]
    assert stored == [
        datetime(2026, 3, 1, 9, 30, 0, 500000),
        datetime(2026, 3, 1, 9, 31, 0, 500000),
        datetime(2026, 3, 1, 9, 31, 0, 500000),
    ]
    [row] = shard_db.event_rows()
    assert row.started_date == datetime(2026, 3, 1, 9, 30, 0, 500000, tzinfo=UTC)
    assert row.started_date.tzinfo == UTC


class Money(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    amount: Decimal
    currency_code: str


class TransferParams(ActionParams):
    from_wallet: uuid.UUID
    to_shard: ShardIdentifier
    money: Money
    requested_at: datetime
    shade: Shade
    memo_lines: list[str]
    note: str | None = None


@dataclass(frozen=True)
class RenameParams:
    gadget_id: uuid.UUID
    new_name: str
    dimensions: Dimensions


def test_params_are_stored_as_a_camel_case_json_object_with_nested_objects(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    wallet = uuid.UUID("0191d6a4-7000-7000-8000-000000000001")

    executor.execute(
        DoNothing(),
        TransferParams(
            from_wallet=wallet,
            to_shard=ShardIdentifier(1, 0),
            money=Money(amount=Decimal("10.50"), currency_code="EUR"),
            requested_at=T0,
            shade=Shade.BLUE,
            memo_lines=["rent", "march"],
        ),
    )
    executor.execute(DoNothing(), RenameParams(wallet, "beta", Dimensions(width_mm=3, height_mm=4)))
    executor.execute(DoNothing(), {"snake_key": 1, "nested": {"deeper_key": [1, "two"]}})

    params = [r.action_params for r in sorted(shard_db.event_rows(), key=lambda r: r.started_date)]
    assert params == [
        {
            "fromWallet": str(wallet),
            "toShard": {"group": 1, "member": 0},
            "money": {"amount": "10.50", "currencyCode": "EUR"},
            "requestedAt": "2026-03-01T09:30:00.123456Z",
            "shade": "blue",
            "memoLines": ["rent", "march"],
            "note": None,
        },
        {"gadgetId": str(wallet), "newName": "beta", "dimensions": {"widthMm": 3, "heightMm": 4}},
        {"snake_key": 1, "nested": {"deeper_key": [1, "two"]}},
    ]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        (None, "None"),
        (42, "int"),
        ("text", "str"),
        ([1, 2], "list"),
        ((1, 2), "tuple"),
        ({"x": object()}, "dict"),
    ],
)
def test_params_that_are_not_a_json_object_are_refused_before_perform(shard_db, params, named):
    performed = []

    class Record(Action[object, None]):
        def perform(self, principal, params):
            performed.append(params)

    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    with pytest.raises(InvalidActionParamsError, match=r"action params of Record .*" + named):
        executor.execute(Record(), params)

    assert performed == []
    assert shard_db.event_rows() == []


def test_an_unregistered_shard_in_an_id_lands_on_the_default_shard(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")

    outcome = executor.execute_with_outcome(
        CreateGadget(), CreateGadgetParams(name="far", color="red", shard=ShardIdentifier(9, 9))
    )

    assert ShardedUUID.shard_of(outcome.result) == ShardIdentifier(9, 9)
    assert outcome.shards == (GLOBAL,)
    assert [g.id for g in shard_db.gadgets()] == [outcome.result]
    [row] = shard_db.event_rows()
    assert row.model_id == str(outcome.result)


def test_the_payload_decodes_back_into_the_same_event(shard_db):
    priced = GadgetPriced(
        price=Decimal("12.50"),
        priced_at=datetime(2026, 3, 1, 9, 30, 0, 1, tzinfo=UTC),
        catalog_id=uuid.uuid4(),
        shade=Shade.RED,
        dimensions=Dimensions(width_mm=30, height_mm=40),
        tags=["new", "sale"],
    )

    class Price(Action[dict, uuid.UUID]):
        def perform(self, principal, params):
            gadget = self.plan.add(Gadget(id=ShardedUUID.generate(), name="priced", color="red"), priced)
            return gadget.id

    gadget_id = ActionExecutor(registry_of(shard_db), namespace="test.outbox").execute(Price(), {})

    [row] = shard_db.event_rows()
    assert row.payload["price"] == "12.50"
    assert row.payload["dimensions"] == {"widthMm": 30, "heightMm": 40}
    decoded = default_codec.decode(row.payload, GadgetPriced)
    assert decoded == priced.model_copy(update={"model_id": str(gadget_id), "model_name": "Gadget"})
    assert default_codec.decode_named(row.event_type, row.payload) == decoded


def test_execute_by_class_needs_a_registered_instance(shard_db):
    registry = registry_of(shard_db)
    with pytest.raises(ActionNotRegisteredError, match=r"DoNothing is not registered.*actions=\[DoNothing"):
        ActionExecutor(registry, namespace="test.outbox").execute(DoNothing, {})

    executor = ActionExecutor(registry, namespace="test.outbox", actions=[DoNothing()])
    assert executor.execute(DoNothing, {}, principal="bob") == "nothing for bob"
    assert len(shard_db.event_rows()) == 1


def test_the_plan_exists_only_while_perform_runs(shard_db):
    kept = []

    class Keep(Action[dict, None]):
        def perform(self, principal, params):
            kept.append(self.plan)

    with pytest.raises(NoActionRunningError, match="only while ActionExecutor.execute"):
        current_plan()
    ActionExecutor(registry_of(shard_db), namespace="test.outbox").execute(Keep(), {})
    with pytest.raises(RuntimeError, match="perform\\(\\) has returned"):
        kept[0].emit(MemoWritten(text="too late"))
    with pytest.raises(NoActionRunningError):
        Keep().plan  # noqa: B018


def test_action_marker_tags_action_classes_only():
    assert is_action(CreateGadget)
    assert not is_action(DoNothing)

    class Sub(CreateGadget):
        pass

    assert not is_action(Sub)  # the mark is per class, not inherited
    assert action(Sub) is Sub and is_action(Sub)
    with pytest.raises(TypeError, match=r"@action marks Action subclasses; .*NotAnAction is not one"):

        @action
        class NotAnAction:
            pass

    with pytest.raises(TypeError, match=r"write @action, not @action\(\)"):
        action("CreateGadget")


def test_one_action_instance_runs_concurrently_with_a_plan_per_thread(shard_db):
    executor = ActionExecutor(registry_of(shard_db), namespace="test.outbox")
    create = CreateGadget()

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(
            pool.map(
                lambda n: executor.execute_with_outcome(
                    create, CreateGadgetParams(name=f"g{n}", color="red")
                ),
                range(8),
            )
        )

    rows = shard_db.event_rows()
    assert len({o.action_id for o in outcomes}) == 8
    assert {(r.action_id, r.model_id) for r in rows} == {(o.action_id, str(o.result)) for o in outcomes}
    assert sorted(g.name for g in shard_db.gadgets()) == sorted(f"g{n}" for n in range(8))
