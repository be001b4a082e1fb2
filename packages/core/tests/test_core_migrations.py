import json
import uuid
from datetime import UTC, datetime
from importlib.metadata import EntryPoint

import pytest
import sqlalchemy as sa

from ekbatan.core import (
    DatabaseRegistry,
    Migration,
    MigrationContributorError,
    MigrationError,
    ShardingConfig,
    eventlog_tables,
    framework_statements,
    migrate,
)
from ekbatan.core.migrations import (
    HISTORY_TABLE,
    MigrationTarget,
    core_migrations,
    eventlog_column_types,
    eventlog_index_name,
    eventlog_statements,
    load_contributions,
)
from testsupport import create_isolated_database, server_url

CORE = "ekbatan.core.migrations._core_contributions:core_migrations"


def demo_migrations(fail_in_v2=False):
    def v1(dialect):
        return ["CREATE TABLE IF NOT EXISTS demo_items (id INT PRIMARY KEY)"]

    def v2(dialect):
        statements = ["CREATE TABLE IF NOT EXISTS demo_more (id INT PRIMARY KEY)"]
        if fail_in_v2:
            statements.append("INSERT INTO no_such_table VALUES (1)")
        return statements

    # Contributed out of order on purpose: the migrator sorts versions naturally.
    return [("demo", "10", "more", v2), ("demo", "2", "items", v1)]


@pytest.fixture
def two_shards(dialect):
    """Two databases (= two shards), each with its own eventlog name, removed afterwards."""
    databases = [create_isolated_database(dialect, scope="database") for _ in range(2)]
    eventlogs = [f"el_{uuid.uuid4().hex[:10]}" for _ in databases]
    yield list(zip(databases, eventlogs, strict=True))
    for db in databases:
        db.drop()
    if dialect in ("mariadb", "mysql"):
        admin = sa.create_engine(server_url(dialect), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
        with admin.connect() as connection:
            for name in eventlogs:
                connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()


def settings_for(shards, *, urls=None):
    urls = urls or [db.url for db, _ in shards]
    return ShardingConfig.model_validate(
        {
            "default-shard": {"group": 0, "member": 0},
            "groups": [
                {
                    "group": index,
                    "name": name,
                    "members": [
                        {
                            "member": 0,
                            "eventlog-schema": eventlog,
                            "configs": {"primary-config": {"url": url}},
                        }
                    ],
                }
                for index, (name, url, (_, eventlog)) in enumerate(
                    zip(["global", "mexico"], urls, shards, strict=True)
                )
            ],
        }
    )


def table_names(engine, dialect, eventlog):
    inspector = sa.inspect(engine)
    if dialect == "sqlite":
        return set(inspector.get_table_names())
    return set(inspector.get_table_names()) | {
        f"{eventlog}.{t}" for t in inspector.get_table_names(schema=eventlog)
    }


#: core's versions: the eventlog schema with events and action_traces
OUTBOX_VERSIONS = [("outbox", "1")]


def history(engine):
    with engine.connect() as connection:
        return sorted(connection.execute(sa.text(f"SELECT component, version FROM {HISTORY_TABLE}")).all())


def test_migrate_two_shards_creates_everything_once(dialect, two_shards):
    """Core's contribution alone (as without the local event handler installed): the eventlog
    gets core's tables, and no event_notifications, which is the local event handler's."""
    contributions = core_migrations() + demo_migrations()
    reports = migrate(settings_for(two_shards), contributions=contributions)

    assert [r.name for r in reports] == ["global/member-0", "mexico/member-0"]
    assert all(r.applied == [("demo", "2"), ("demo", "10"), *OUTBOX_VERSIONS] for r in reports)
    for db, eventlog in two_shards:
        engine = db.engine()
        names = table_names(engine, dialect, eventlog)
        qualified = "{}_{}" if dialect == "sqlite" else "{}.{}"
        eventlog_names = {qualified.format(eventlog, t) for t in ("events", "action_traces")}
        assert eventlog_names <= names
        assert qualified.format(eventlog, "event_notifications") not in names
        assert {"demo_items", "demo_more", HISTORY_TABLE} <= names
        assert history(engine) == [("demo", "10"), ("demo", "2"), *OUTBOX_VERSIONS]

    again = migrate(settings_for(two_shards), contributions=contributions)
    assert all(r.applied == [] and len(r.already_applied) == 3 for r in again)
    assert all(
        history(db.engine()) == [("demo", "10"), ("demo", "2"), *OUTBOX_VERSIONS] for db, _ in two_shards
    )


def test_the_table_objects_match_the_ddl(dialect, two_shards):
    (db, eventlog), _ = two_shards
    migrate([MigrationTarget("only", db.url, eventlog)], contributions=core_migrations())
    tables = eventlog_tables("postgresql" if dialect == "postgres" else dialect, eventlog)
    engine = db.engine()
    now = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    event_id, action_id = uuid.uuid4(), uuid.uuid4()
    common = {
        "namespace": "test.core",
        "action_id": action_id,
        "action_name": "WidgetCreateAction",
        "action_params": {"name": "alpha"},
        "started_date": now,
        "completion_date": now,
        "model_id": "m-1",
        "model_type": "Widget",
        "payload": {"modelId": "m-1", "color": "red"},
        "event_date": now,
    }
    insert = tables.events.insert().values(
        id=event_id, event_type="WidgetCreatedEvent", delivered=False, **common
    )
    with engine.begin() as connection:
        connection.execute(insert)
    with engine.connect() as connection:
        event = connection.execute(sa.select(tables.events)).one()
        undelivered = connection.execute(
            sa.select(sa.func.count()).select_from(tables.events).where(tables.events.c.delivered.is_(False))
        ).scalar()
    assert event.id == event_id and event.action_id == action_id
    assert event.event_date == now and event.delivered is False
    assert (json.loads(event.payload) if isinstance(event.payload, str) else event.payload)["color"] == "red"
    assert undelivered == 1
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:  # the primary key
        connection.execute(insert)


def test_a_failing_shard_is_reported_by_name_and_stops_the_run(dialect, two_shards):
    (first, _), _ = two_shards
    if dialect == "sqlite":
        bad = "sqlite:////nonexistent-dir/for/sure/x.sqlite"
    else:
        bad = server_url(dialect, "no_such_database_" + uuid.uuid4().hex[:8])
    with pytest.raises(MigrationError) as raised:
        migrate(settings_for(two_shards, urls=[first.url, bad]), contributions=demo_migrations())
    assert raised.value.target == "mexico/member-0"
    assert "migrating shard mexico/member-0 failed" in str(raised.value)
    assert [r.name for r in raised.value.completed] == ["global/member-0"]
    assert history(first.engine()) == [("demo", "10"), ("demo", "2")]


def test_a_failing_version_is_not_recorded_and_a_rerun_completes_it(dialect, two_shards):
    (db, _), _ = two_shards
    target = [MigrationTarget("global/member-0", db.url)]
    with pytest.raises(MigrationError) as raised:
        migrate(target, contributions=demo_migrations(fail_in_v2=True))
    assert "at demo 10" in str(raised.value)
    engine = db.engine()
    assert history(engine) == [("demo", "2")]
    if dialect in ("postgres", "sqlite"):
        # transactional DDL: nothing of the failed version is left behind
        assert "demo_more" not in sa.inspect(engine).get_table_names()
    reports = migrate(target, contributions=demo_migrations())
    assert reports[0].applied == [("demo", "10")]
    assert history(engine) == [("demo", "10"), ("demo", "2")]


@pytest.mark.dialects("postgres", "sqlite")
def test_migrating_through_a_registry_uses_its_primaries(dialect, two_shards):
    with DatabaseRegistry.from_config(settings_for(two_shards)) as registry:
        reports = migrate(registry, contributions=core_migrations())
        assert [r.name for r in reports] == ["global/member-0", "mexico/member-0"]
        assert not registry.primary().closed


def test_contributors_are_discovered_through_entry_points():
    found = load_contributions([EntryPoint("outbox", CORE, "ekbatan.migrations")])
    assert [(m.component, m.version) for m in found] == OUTBOX_VERSIONS


def test_a_contributor_that_fails_to_load_is_named_before_any_database_is_touched():
    broken = EntryPoint("scheduled_tasks", "ekbatan.no_such_module.schema:migrations", "ekbatan.migrations")
    with pytest.raises(MigrationContributorError) as raised:
        load_contributions([EntryPoint("outbox", CORE, "ekbatan.migrations"), broken])
    message = str(raised.value)
    assert "'scheduled_tasks'" in message and "ekbatan.no_such_module.schema:migrations" in message
    assert "ModuleNotFoundError" in message


@pytest.mark.parametrize(
    ("contribution", "fragment"),
    [
        ([("demo", "1", "x")], "(component, version, description, statements)"),
        ([("demo", " ", "x", lambda d: [])], "non-blank"),
        ([("demo", "1", "x", "CREATE TABLE t")], "must be callable"),
        ([("demo", "1", "x", lambda d: []), ("demo", "1", "y", lambda d: [])], "contributed twice"),
    ],
)
def test_malformed_contributions_are_refused(contribution, fragment):
    with pytest.raises(MigrationContributorError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        framework_statements("sqlite", contributions=contribution)


def test_statements_must_be_a_list_of_strings():
    with pytest.raises(MigrationContributorError, match="must return a list of SQL strings"):
        framework_statements(
            "sqlite", contributions=[Migration("demo", "1", "x", lambda d: "CREATE TABLE t")]
        )


def test_framework_statements_for_alembic():
    statements = framework_statements("postgresql", eventlog_schema="outbox", contributions=core_migrations())
    assert statements[0] == "CREATE SCHEMA IF NOT EXISTS outbox"
    assert any("outbox.events" in s for s in statements) and any(
        "outbox.action_traces" in s for s in statements
    )
    assert not any("event_notifications" in s for s in statements)


def test_dialect_specific_ddl():
    mysql = "\n".join(eventlog_statements("mysql"))
    assert "CREATE DATABASE IF NOT EXISTS eventlog" in mysql
    assert "id CHAR(36) CHARACTER SET ascii NOT NULL" in mysql and "PRIMARY KEY (id)" in mysql
    assert "INDEX events_pending_fanout (delivered, event_type, event_date)" in mysql
    mariadb = "\n".join(eventlog_statements("mariadb"))
    assert "id UUID PRIMARY KEY" in mariadb and "DATETIME(6)" in mariadb and "JSONB" not in mariadb
    postgres = "\n".join(eventlog_statements("postgresql"))
    assert (
        "WHERE delivered = FALSE" in postgres
        and "CREATE INDEX IF NOT EXISTS action_traces_recorded" in postgres
    )
    sqlite = "\n".join(eventlog_statements("sqlite", "outbox"))
    assert "outbox_events" in sqlite and "outbox.events" not in sqlite
    with pytest.raises(ValueError, match="not a plain SQL identifier"):
        eventlog_statements("postgresql", "eventlog; DROP TABLE x")


def test_eventlog_column_types_and_index_names():
    assert eventlog_column_types("postgresql").json == "JSONB"
    assert eventlog_column_types("mysql").primary_key == ",\n  PRIMARY KEY (id)"
    assert all(eventlog_column_types(d).primary_key == "" for d in ("postgresql", "mariadb", "sqlite"))
    with pytest.raises(ValueError, match="dialect 'oracle'; Ekbatan supports postgresql, mariadb"):
        eventlog_column_types("oracle")
    assert eventlog_index_name("sqlite", "events_undelivered", "outbox") == "outbox_events_undelivered"
    assert eventlog_index_name("mariadb", "events_undelivered", "outbox") == "events_undelivered"
    with pytest.raises(ValueError, match="eventlog index"):
        eventlog_index_name("postgresql", "x; DROP TABLE y")
