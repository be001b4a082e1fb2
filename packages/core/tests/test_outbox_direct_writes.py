"""Statements run directly on ``plan.connection(shard)`` count as writes by what they are.

Each write below is one a first-word test misses (CTEs before the verb, a leading comment) or
one a result-set test misses (``RETURNING``, a data-modifying CTE). Each must make its shard
count for the cross-shard rule and get the action's sentinel row there.
"""

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from outbox_support import registry_of

from ekbatan.core import Action, ActionExecutor, CrossShardError, ShardIdentifier
from testsupport.sample_domain import Memo, MemoWritten

GLOBAL = ShardIdentifier(0, 0)
MEXICO = ShardIdentifier(1, 0)
memos = Memo.__table__

Statement = Callable[[sa.Connection], object]


def core_insert_with_added_cte(connection: sa.Connection) -> object:
    source = sa.select(sa.literal("added cte").label("text")).cte("src")
    return connection.execute(
        sa.insert(memos).from_select(["text"], sa.select(source.c.text)).add_cte(source)
    )


def core_insert_from_select_on_a_cte(connection: sa.Connection) -> object:
    source = sa.select(sa.literal("select cte").label("text")).cte("src")
    return connection.execute(sa.insert(memos).from_select(["text"], sa.select(source.c.text)))


def core_insert_returning(connection: sa.Connection) -> object:
    return connection.execute(sa.insert(memos).values(text="returning").returning(memos.c.id)).all()


def text_after_a_block_comment(connection: sa.Connection) -> object:
    return connection.execute(sa.text("/* audit */ INSERT INTO memos (text) VALUES ('commented')"))


def driver_sql_after_a_line_comment(connection: sa.Connection) -> object:
    return connection.exec_driver_sql("-- audit\nUPDATE memos SET text = 'none matched' WHERE id = -1")


def text_with_then_insert(connection: sa.Connection) -> object:
    return connection.execute(
        sa.text("WITH src AS (SELECT 'text cte' AS text) INSERT INTO memos (text) SELECT text FROM src")
    )


def text_insert_returning(connection: sa.Connection) -> object:
    return connection.execute(sa.text("/* audit */ INSERT INTO memos (text) VALUES ('r') RETURNING id")).all()


def core_select_from_a_data_modifying_cte(connection: sa.Connection) -> object:
    inserted = sa.insert(memos).values(text="dml cte").returning(memos.c.id).cte("x")
    return connection.execute(sa.select(inserted.c.id)).all()


def core_select_with_an_added_data_modifying_cte(connection: sa.Connection) -> object:
    inserted = sa.insert(memos).values(text="added dml cte").returning(memos.c.id).cte("x")
    return connection.execute(sa.select(sa.literal(1)).add_cte(inserted)).all()


EVERYWHERE = [
    core_insert_with_added_cte,
    core_insert_from_select_on_a_cte,
    core_insert_returning,
    text_after_a_block_comment,
    driver_sql_after_a_line_comment,
]
# MariaDB/MySQL put WITH after INSERT INTO, and their drivers cannot tell a RETURNING from a SELECT.
POSTGRES_AND_SQLITE = [text_with_then_insert, text_insert_returning]
# Only PostgreSQL lets a CTE write.
POSTGRES = [core_select_from_a_data_modifying_cte, core_select_with_an_added_data_modifying_cte]


class WriteDirectly(Action[dict, None]):
    """Runs ``statement`` on Mexico's connection; with ``plan_global``, also plans a memo on Global."""

    def __init__(self, statement: Statement, *, plan_global: bool) -> None:
        self.statement = statement
        self.plan_global = plan_global

    def perform(self, principal, params):
        self.statement(self.plan.connection(MEXICO))
        if self.plan_global:
            self.plan.add(Memo(text="planned on global"), MemoWritten(text="planned on global"))


def executor_for(first, second):
    return ActionExecutor(registry_of(first, second, default=GLOBAL), namespace="test.direct")


def refused_as_cross_shard(two_shard_dbs, statement: Statement) -> None:
    first, second = two_shard_dbs

    with pytest.raises(CrossShardError) as raised:
        executor_for(first, second).execute(WriteDirectly(statement, plan_global=True), {})

    assert raised.value.shards == (GLOBAL, MEXICO)
    for db in (first, second):
        assert db.count(Memo) == 0
        assert db.event_rows() == []


def sentinel_on_the_written_shard(two_shard_dbs, statement: Statement) -> None:
    first, second = two_shard_dbs

    outcome = executor_for(first, second).execute_with_outcome(
        WriteDirectly(statement, plan_global=False), {}
    )

    assert outcome.shards == (MEXICO,)
    [sentinel] = second.event_rows()
    assert (sentinel.event_type, sentinel.action_id) == (None, outcome.action_id)
    assert first.event_rows() == []


@pytest.mark.parametrize("statement", EVERYWHERE, ids=lambda s: s.__name__)
def test_a_direct_write_with_a_planned_write_elsewhere_is_cross_shard(two_shard_dbs, statement):
    refused_as_cross_shard(two_shard_dbs, statement)


@pytest.mark.parametrize("statement", EVERYWHERE, ids=lambda s: s.__name__)
def test_a_direct_write_alone_gets_the_sentinel_on_its_shard(two_shard_dbs, statement):
    sentinel_on_the_written_shard(two_shard_dbs, statement)


@pytest.mark.dialects("postgres", "sqlite")
@pytest.mark.parametrize("statement", POSTGRES_AND_SQLITE, ids=lambda s: s.__name__)
def test_a_text_write_the_driver_reports_is_cross_shard(two_shard_dbs, statement):
    refused_as_cross_shard(two_shard_dbs, statement)


@pytest.mark.dialects("postgres", "sqlite")
@pytest.mark.parametrize("statement", POSTGRES_AND_SQLITE, ids=lambda s: s.__name__)
def test_a_text_write_the_driver_reports_gets_the_sentinel_on_its_shard(two_shard_dbs, statement):
    sentinel_on_the_written_shard(two_shard_dbs, statement)


@pytest.mark.dialects("postgres")
@pytest.mark.parametrize("statement", POSTGRES, ids=lambda s: s.__name__)
def test_a_select_with_a_data_modifying_cte_is_cross_shard(two_shard_dbs, statement):
    refused_as_cross_shard(two_shard_dbs, statement)


@pytest.mark.dialects("postgres")
@pytest.mark.parametrize("statement", POSTGRES, ids=lambda s: s.__name__)
def test_a_select_with_a_data_modifying_cte_gets_the_sentinel_on_its_shard(two_shard_dbs, statement):
    sentinel_on_the_written_shard(two_shard_dbs, statement)


def core_select_for_update(connection: sa.Connection) -> object:
    return connection.execute(sa.select(memos).with_for_update()).all()


def text_select_for_update(connection: sa.Connection) -> object:
    # SQLite has no FOR UPDATE; its whole database is locked by the first write instead.
    suffix = "" if connection.dialect.name == "sqlite" else " FOR UPDATE"
    return connection.execute(sa.text(f"/* lock */ SELECT id FROM memos{suffix}")).all()


def text_select(connection: sa.Connection) -> object:
    return connection.exec_driver_sql("WITH src AS (SELECT 1 AS one) SELECT one FROM src").all()


@pytest.mark.parametrize(
    "statement", [core_select_for_update, text_select_for_update, text_select], ids=lambda s: s.__name__
)
def test_locking_or_reading_another_shard_is_not_a_write(two_shard_dbs, statement):
    # FOR UPDATE holds row locks until the action ends but changes nothing: no partial commit
    # could leave anything behind on that shard, and no sentinel has anything to record there.
    first, second = two_shard_dbs
    executor = executor_for(first, second)

    with_global = executor.execute_with_outcome(WriteDirectly(statement, plan_global=True), {})
    alone = executor.execute_with_outcome(WriteDirectly(statement, plan_global=False), {})

    assert with_global.shards == alone.shards == (GLOBAL,)
    assert {r.action_id for r in first.event_rows()} == {with_global.action_id, alone.action_id}
    assert second.event_rows() == [] and second.count(Memo) == 0
