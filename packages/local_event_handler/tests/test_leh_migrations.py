"""``event_notifications`` as this package contributes it (component ``event_notifications``)
beside core's ``outbox``: on a fresh database; on one migrated by the releases in which core
contributed it (component ``eventlog`` 1 to 3, replayed from their frozen statements); after the
table was dropped; and alone, before core's contribution, on every dialect."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import entry_points
from typing import Any

import pytest
import sqlalchemy as sa

from ekbatan.core import migrate
from ekbatan.core.migrations import (
    ENTRY_POINT_GROUP,
    HISTORY_TABLE,
    Migration,
    MigrationTarget,
    core_migrations,
    eventlog_tables,
    load_contributions,
)
from ekbatan.local_event_handler import (
    notifications_migrations,
    notifications_statements,
    notifications_table,
    notifications_table_name,
)
from testsupport import create_isolated_database
from testsupport.eventlog_shards import drop_eventlog
from testsupport.previous_eventlog import frozen_versions, previous_eventlog_migrations

#: what the installed packages contribute to the eventlog now
CURRENT = core_migrations() + notifications_migrations()
NEW_VERSIONS = [("event_notifications", "1"), ("outbox", "1")]
PREVIOUS_VERSIONS = [("eventlog", "1"), ("eventlog", "2"), ("eventlog", "3")]
NOW = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


@dataclass
class Target:
    """One fresh database with an eventlog of its own name."""

    dialect: str
    url: str
    eventlog: str
    engine: sa.Engine

    @property
    def dialect_name(self) -> str:
        return self.engine.dialect.name  # postgresql, mariadb, mysql or sqlite

    def migrate(self, contributions: list[Migration]) -> Any:
        [report] = migrate([MigrationTarget("only", self.url, self.eventlog)], contributions=contributions)
        return report

    def history(self) -> list[tuple[str, str, str]]:
        with self.engine.connect() as connection:
            query = f"SELECT component, version, checksum FROM {HISTORY_TABLE} ORDER BY component, version"
            return [tuple(row) for row in connection.execute(sa.text(query))]

    def notifications(self) -> sa.Table:
        return notifications_table(self.dialect_name, self.eventlog)

    def has_notifications_table(self) -> bool:
        table = self.notifications()
        return sa.inspect(self.engine).has_table(table.name, schema=table.schema)

    def schema(self) -> dict[str, Any]:
        """The eventlog's tables as the server describes them — columns, keys, indexes — with the
        eventlog's own name taken out, so that two databases compare."""
        inspector = sa.inspect(self.engine)
        described: dict[str, Any] = {}
        for table in (
            *eventlog_tables(self.dialect_name, self.eventlog).metadata.tables.values(),
            self.notifications(),
        ):
            name, schema = table.name, table.schema
            indexes = sorted(
                (
                    i["name"],
                    tuple(i["column_names"]),
                    bool(i["unique"]),
                    sorted((k, str(v)) for k, v in i.get("dialect_options", {}).items()),
                )
                for i in inspector.get_indexes(name, schema=schema)
            )
            described[name.replace(self.eventlog, "<eventlog>")] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in inspector.get_columns(name, schema=schema)
                ],
                "primary key": inspector.get_pk_constraint(name, schema=schema)["constrained_columns"],
                "unique": sorted(
                    tuple(u["column_names"]) for u in inspector.get_unique_constraints(name, schema=schema)
                ),
                "indexes": [(n.replace(self.eventlog, "<eventlog>"), *rest) for n, *rest in indexes],
            }
        return described

    def write_event_and_notification(self) -> uuid.UUID:
        """One event and its notification, as the outbox and the fan-out write them."""
        event_id = uuid.uuid4()
        event = {
            "namespace": "test.migrations",
            "action_id": uuid.uuid4(),
            "action_name": "GadgetCreateAction",
            "action_params": {"name": "alpha"},
            "started_date": NOW,
            "completion_date": NOW,
            "model_id": "g-1",
            "model_type": "Gadget",
            "event_type": "GadgetCreated",
            "payload": {"color": "red"},
            "event_date": NOW,
        }
        with self.engine.begin() as connection:
            events = eventlog_tables(self.dialect_name, self.eventlog).events
            connection.execute(events.insert().values(id=event_id, delivered=True, **event))
            connection.execute(
                self.notifications()
                .insert()
                .values(
                    id=uuid.uuid4(),
                    event_id=event_id,
                    handler_name="mailer",
                    state="FAILED",
                    attempts=2,
                    next_retry_at=NOW,
                    created_date=NOW,
                    updated_date=NOW,
                    **event,
                )
            )
        return event_id

    def rows(self) -> tuple[list[Any], list[Any]]:
        """(events' ids, notifications as (event_id, handler, state, attempts))."""
        events = eventlog_tables(self.dialect_name, self.eventlog).events
        notifications = self.notifications()
        with self.engine.connect() as connection:
            return (
                list(connection.execute(sa.select(events.c.id)).scalars()),
                [
                    tuple(row)
                    for row in connection.execute(
                        sa.select(
                            notifications.c.event_id,
                            notifications.c.handler_name,
                            notifications.c.state,
                            notifications.c.attempts,
                        )
                    )
                ],
            )

    def drop_notifications(self) -> None:
        with self.engine.begin() as connection:
            connection.exec_driver_sql(
                f"DROP TABLE {notifications_table_name(self.dialect_name, self.eventlog)}"
            )


def create_target(dialect: str) -> Iterator[Target]:
    database = create_isolated_database(dialect, scope="schema", prefix="lehm")
    eventlog = f"el_{uuid.uuid4().hex[:10]}"
    try:
        yield Target(dialect, database.url, eventlog, database.engine())
    finally:
        database.drop()
        drop_eventlog(dialect, eventlog)


@pytest.fixture
def target(dialect: str) -> Iterator[Target]:
    yield from create_target(dialect)


@pytest.fixture
def other_target(dialect: str) -> Iterator[Target]:
    yield from create_target(dialect)


def migrator_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ekbatan.core.migrations.migrator" and r.levelno >= logging.WARNING
    ]


# ---------------------------------------------------------------- the contribution


def test_the_installed_packages_contribute_event_notifications_before_the_outbox():
    [point] = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name == "event_notifications"]
    assert point.value == "ekbatan.local_event_handler.notifications_ddl:notifications_migrations"
    installed = [(m.component, m.version) for m in load_contributions() if m.component != "scheduled_tasks"]
    assert installed == NEW_VERSIONS


def test_the_frozen_previous_statements_are_those_the_previous_release_recorded():
    """The replayed versions are byte for byte the old ones: their checksums with the default
    eventlog name are those the previous release computed."""
    frozen = {v["version"]: v["checksum_with_schema_eventlog"] for v in frozen_versions()["versions"]}
    for migration in previous_eventlog_migrations():
        for dialect, checksum in frozen[migration.version].items():
            assert migration.checksum(migration.statements_for(dialect)) == checksum, (
                migration.version,
                dialect,
            )


@pytest.mark.parametrize("dialect_name", ["postgresql", "mariadb", "mysql", "sqlite"])
def test_every_statement_is_idempotent_and_the_indexes_keep_their_names(dialect_name):
    statements = notifications_statements(dialect_name, "outbox")
    assert all(" IF NOT EXISTS " in s for s in statements), statements
    text = "\n".join(statements)
    expected = {
        "postgresql": ["CREATE SCHEMA IF NOT EXISTS outbox", "event_notifications_due ON outbox.event_notifications"],
        "mariadb": ["CREATE DATABASE IF NOT EXISTS outbox", "INDEX event_notifications_due (next_retry_at)",
                    "event_notifications_open ON outbox.event_notifications (state, next_retry_at)"],
        "mysql": ["CREATE DATABASE IF NOT EXISTS outbox", "INDEX event_notifications_due (next_retry_at)",
                  "INDEX event_notifications_open (state, next_retry_at)", "PRIMARY KEY (id)"],
        "sqlite": ["outbox_event_notifications_due ON outbox_event_notifications"],
    }[dialect_name]  # fmt: skip
    assert all(fragment in text for fragment in expected), text
    if dialect_name == "mysql":  # no CREATE INDEX IF NOT EXISTS there: everything inside CREATE TABLE
        assert len(statements) == 2 and "CREATE INDEX" not in text


# ---------------------------------------------------------------- on a database


def test_a_fresh_database_gets_the_eventlog_with_event_notifications(target):
    report = target.migrate(CURRENT)
    assert report.applied == NEW_VERSIONS and report.reapplied == []
    assert target.has_notifications_table()
    event_id = target.write_event_and_notification()
    assert target.rows() == ([event_id], [(event_id, "mailer", "FAILED", 2)])
    with (
        pytest.raises(sa.exc.IntegrityError),
        target.engine.begin() as connection,
    ):  # one per (event, handler)
        connection.execute(
            target.notifications().insert().values(
                id=uuid.uuid4(), event_id=event_id, handler_name="mailer", namespace="n", action_id=uuid.uuid4(),
                action_name="a", action_params={}, started_date=NOW, completion_date=NOW, event_type="GadgetCreated",
                event_date=NOW, state="PENDING", next_retry_at=NOW, created_date=NOW, updated_date=NOW,
            )
        )  # fmt: skip
    assert [(c, v) for c, v, _ in target.history()] == NEW_VERSIONS


def test_event_notifications_alone_creates_the_schema_it_lives_in(target):
    """Components apply alphabetically: ``event_notifications`` before core's ``outbox``, so it
    does not count on the schema (a database on MariaDB/MySQL) being there."""
    assert target.migrate(notifications_migrations()).applied == [("event_notifications", "1")]
    assert target.has_notifications_table()
    assert target.migrate(CURRENT).applied == [("outbox", "1")]


def test_a_database_of_the_previous_release_keeps_its_rows_and_gets_no_warning(target, other_target, caplog):
    caplog.set_level(logging.INFO, logger="ekbatan.core.migrations.migrator")
    assert target.migrate(previous_eventlog_migrations()).applied == PREVIOUS_VERSIONS
    event_id = target.write_event_and_notification()
    schema, history, rows = target.schema(), target.history(), target.rows()

    report = target.migrate(CURRENT)
    # statements that find everything in place: recorded, nothing re-applied, nothing warned
    assert report.applied == NEW_VERSIONS and report.reapplied == [] and report.already_applied == []
    assert migrator_warnings(caplog) == []
    assert target.rows() == rows == ([event_id], [(event_id, "mailer", "FAILED", 2)])
    assert target.schema() == schema
    # the previous versions' rows stay as they were, checksums included
    after = target.history()
    assert [row for row in after if row[0] == "eventlog"] == history
    assert [(c, v) for c, v, _ in after if c != "eventlog"] == NEW_VERSIONS

    again = target.migrate(CURRENT)
    assert again.applied == [] and again.already_applied == NEW_VERSIONS and again.reapplied == []
    assert migrator_warnings(caplog) == []

    # and a fresh database gets the very same tables, columns and indexes
    other_target.migrate(CURRENT)
    assert other_target.schema() == schema


@pytest.mark.parametrize("history", ["current", "previous release"])
def test_a_dropped_event_notifications_is_created_again(target, history, caplog):
    caplog.set_level(logging.INFO, logger="ekbatan.core.migrations.migrator")
    if history == "previous release":
        target.migrate(previous_eventlog_migrations())
    target.migrate(CURRENT)
    event_id = target.write_event_and_notification()
    schema = target.schema()
    target.drop_notifications()
    caplog.clear()

    report = target.migrate(CURRENT)
    assert report.applied == [] and report.reapplied == [("event_notifications", "1")]
    [warning] = migrator_warnings(caplog)
    assert "event_notifications 1 is recorded as applied but table(s)" in warning, warning
    assert target.schema() == schema  # its indexes too
    assert target.rows() == ([event_id], [])  # the events are untouched
    assert target.migrate(CURRENT).reapplied == []


def test_a_previous_database_whose_notifications_were_dropped_gets_them_on_upgrade(target, caplog):
    caplog.set_level(logging.INFO, logger="ekbatan.core.migrations.migrator")
    target.migrate(previous_eventlog_migrations())
    schema = target.schema()
    target.drop_notifications()
    assert target.migrate(CURRENT).applied == NEW_VERSIONS
    assert migrator_warnings(caplog) == []
    assert target.schema() == schema


def test_without_this_package_core_creates_only_its_tables(target):
    """As with ekbatan-local-event-handler not installed: its entry point is not there."""
    assert target.migrate(core_migrations()).applied == [("outbox", "1")]
    assert not target.has_notifications_table()
    events = eventlog_tables(target.dialect_name, target.eventlog).events
    assert sa.inspect(target.engine).has_table(events.name, schema=events.schema)
