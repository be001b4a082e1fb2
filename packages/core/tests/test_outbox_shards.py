"""ActionExecutor with two shards (two databases): routing, the cross-shard rule, partial commits."""

import uuid

import pytest
import sqlalchemy as sa
from outbox_support import registry_of
from sqlalchemy.exc import IntegrityError

from ekbatan.core import (
    Action,
    ActionExecutor,
    CrossShardError,
    PartiallyCommittedError,
    ShardedUUID,
    ShardIdentifier,
)
from testsupport.sample_domain import Gadget, GadgetCreated, GadgetRecolored, Memo, MemoWritten

GLOBAL = ShardIdentifier(0, 0)
MEXICO = ShardIdentifier(1, 0)


class CreateOnShards(Action[dict, list]):
    """One gadget (with its event) per listed shard, in the order given."""

    def perform(self, principal, params):
        ids = []
        for group, member in params["shards"]:
            gadget = Gadget(
                id=ShardedUUID.generate(ShardIdentifier(group, member)), name=f"g{group}", color="red"
            )
            self.plan.add(gadget, GadgetCreated(name=gadget.name, color="red"))
            ids.append(gadget.id)
        return ids


def executor_for(first, second):
    return ActionExecutor(registry_of(first, second, default=GLOBAL), namespace="test.shards")


def test_a_cross_shard_plan_is_refused_and_nothing_is_written(two_shard_dbs):
    first, second = two_shard_dbs

    with pytest.raises(CrossShardError) as raised:
        executor_for(first, second).execute(CreateOnShards(), {"shards": [[0, 0], [1, 0]]})

    assert raised.value.shards == (GLOBAL, MEXICO)
    assert "CreateOnShards would write to 2 shards ((0,0) (0,0), (1,0) (1,0))" in str(raised.value)
    assert "allow_cross_shard=True" in str(raised.value)
    for db in (first, second):
        assert db.count(Gadget) == 0
        assert db.event_rows() == []


def test_an_allowed_cross_shard_action_writes_each_shard_with_one_action_id(two_shard_dbs):
    first, second = two_shard_dbs

    outcome = executor_for(first, second).execute_with_outcome(
        CreateOnShards(), {"shards": [[1, 0], [0, 0]]}, allow_cross_shard=True
    )

    mexico_id, global_id = outcome.result
    assert outcome.shards == (GLOBAL, MEXICO)
    assert [g.id for g in first.gadgets()] == [global_id]
    assert [g.id for g in second.gadgets()] == [mexico_id]
    [on_global] = first.event_rows()
    [on_mexico] = second.event_rows()
    assert on_global.action_id == on_mexico.action_id == outcome.action_id
    assert on_global.id != on_mexico.id
    assert (on_global.model_id, on_mexico.model_id) == (str(global_id), str(mexico_id))
    assert on_global.completion_date == on_mexico.completion_date


def test_a_shard_with_changes_but_no_events_gets_its_own_sentinel(two_shard_dbs):
    first, second = two_shard_dbs

    class GadgetHereMemoThere(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(
                Gadget(id=ShardedUUID.generate(GLOBAL), name="g", color="red"),
                GadgetCreated(name="g", color="red"),
            )
            self.plan.execute(sa.insert(Memo.__table__).values(text="core statement on mexico"), shard=MEXICO)

    outcome = executor_for(first, second).execute_with_outcome(
        GadgetHereMemoThere(), {}, allow_cross_shard=True
    )

    assert [r.event_type for r in first.event_rows()] == ["GadgetCreated"]
    [sentinel] = second.event_rows()
    assert (sentinel.event_type, sentinel.payload, sentinel.action_id) == (None, None, outcome.action_id)
    assert second.count(Memo) == 1 and first.count(Memo) == 0


def test_reading_another_shard_does_not_make_a_plan_cross_shard(two_shard_dbs):
    first, second = two_shard_dbs
    executor = executor_for(first, second)
    executor.execute(CreateOnShards(), {"shards": [[1, 0]]})

    class CopyCount(Action[dict, int]):
        def perform(self, principal, params):
            seen = self.plan.session(MEXICO).scalar(sa.select(sa.func.count()).select_from(Gadget))
            self.plan.add(Memo(text=f"mexico has {seen}"), MemoWritten(text=f"mexico has {seen}"))
            return seen

    outcome = executor.execute_with_outcome(CopyCount(), {})

    assert outcome.result == 1 and outcome.shards == (GLOBAL,)
    assert [r.event_type for r in first.event_rows()] == ["MemoWritten"]
    assert [r.action_name for r in second.event_rows()] == ["CreateOnShards"]


def test_routing_explicit_shard_loaded_session_and_event_model_ids(two_shard_dbs):
    first, second = two_shard_dbs
    executor = executor_for(first, second)
    plain_id = uuid.uuid4()  # a v4 id carries no shard

    class PlaceOnMexico(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(Gadget(id=plain_id, name="plain", color="red"), shard=MEXICO)
            # Routed to MEXICO because the planned gadget with this id is there.
            self.plan.emit(GadgetCreated(model_id=plain_id, model_name="Gadget", name="plain", color="red"))

    class RecolorLoaded(Action[dict, None]):
        def perform(self, principal, params):
            gadget = self.plan.session(MEXICO).get(Gadget, plain_id)
            gadget.color = "blue"
            self.plan.update(
                gadget, GadgetRecolored(old_color="red", new_color="blue")
            )  # follows its session
            # A sharded model id routes an emitted event on its own.
            self.plan.emit(
                MemoWritten(model_id=ShardedUUID.generate(MEXICO), model_name="Memo", text="routed by id")
            )

    executor.execute(PlaceOnMexico(), {})
    executor.execute(RecolorLoaded(), {})

    assert first.count(Gadget) == 0 and first.event_rows() == []
    assert [(g.id, g.color) for g in second.gadgets()] == [(plain_id, "blue")]
    assert sorted(r.event_type for r in second.event_rows()) == [
        "GadgetCreated",
        "GadgetRecolored",
        "MemoWritten",
    ]


def test_an_unregistered_shard_falls_back_to_the_default_shard(two_shard_dbs):
    first, second = two_shard_dbs

    outcome = executor_for(first, second).execute_with_outcome(CreateOnShards(), {"shards": [[7, 0]]})

    assert outcome.shards == (GLOBAL,)
    assert [g.id for g in first.gadgets()] == outcome.result
    assert [r.model_id for r in first.event_rows()] == [str(outcome.result[0])]
    assert second.count(Gadget) == 0 and second.event_rows() == []


DEFERRED_TABLE = """CREATE TABLE deferred_checks (
  id INT PRIMARY KEY, v INT, CONSTRAINT deferred_unique_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)"""


class GlobalGadgetAndMexicoCommitFailure(Action[dict, None]):
    """Writes on both shards; Mexico's rows break a deferred constraint, so its COMMIT fails."""

    def perform(self, principal, params):
        if params["read_mexico_first"]:
            self.plan.session(MEXICO).execute(sa.text("SELECT 1"))
        self.plan.add(
            Gadget(id=ShardedUUID.generate(GLOBAL), name="kept", color="red"),
            GadgetCreated(name="kept", color="red"),
        )
        self.plan.execute(sa.text("INSERT INTO deferred_checks VALUES (1, 1), (2, 1)"), shard=MEXICO)


@pytest.mark.dialects("postgres")
def test_a_commit_failing_after_another_shard_committed_is_reported_as_partial(two_shard_dbs):
    first, second = two_shard_dbs
    with second.manager.primary.begin() as connection:
        connection.exec_driver_sql(DEFERRED_TABLE)

    # Mexico's transaction opened first (the read), so it commits last: Global is already committed.
    with pytest.raises(PartiallyCommittedError) as raised:
        executor_for(first, second).execute(
            GlobalGadgetAndMexicoCommitFailure(), {"read_mexico_first": True}, allow_cross_shard=True
        )

    assert (raised.value.committed, raised.value.failed) == ((GLOBAL,), MEXICO)
    assert isinstance(raised.value.__cause__, IntegrityError)
    assert "partially committed: committed on (0,0); commit failed on (1,0)" in str(raised.value)
    assert [g.name for g in first.gadgets()] == ["kept"]
    assert [r.event_type for r in first.event_rows()] == ["GadgetCreated"]
    assert second.event_rows() == []
    assert second.count(sa.table("deferred_checks")) == 0


@pytest.mark.dialects("postgres")
def test_a_commit_failing_before_any_other_commit_rolls_everything_back(two_shard_dbs):
    first, second = two_shard_dbs
    with second.manager.primary.begin() as connection:
        connection.exec_driver_sql(DEFERRED_TABLE)

    # Opened in registry order at apply time, so Mexico (opened last) commits first and fails.
    with pytest.raises(IntegrityError):
        executor_for(first, second).execute(
            GlobalGadgetAndMexicoCommitFailure(), {"read_mexico_first": False}, allow_cross_shard=True
        )

    for db in (first, second):
        assert db.count(Gadget) == 0
        assert db.event_rows() == []
