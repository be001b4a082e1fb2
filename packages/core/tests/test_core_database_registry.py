import logging

import pytest
import sqlalchemy as sa

from ekbatan.core import (
    ConnectionProvider,
    DatabaseRegistry,
    JobsPoolNotConfiguredError,
    ShardIdentifier,
    ShardingConfig,
    TransactionManager,
    jobs_connection_provider,
    migrate,
)
from ekbatan.core.migrations import MigrationError
from testsupport import server_url

UNREACHABLE = "postgresql+psycopg://app:hunter2@nonexistent.invalid:5432/{}"


def sharding(
    *, default=(0, 0), jobs=False, replica=False, groups=((0, "global", (0, 1)), (1, "mexico", (0,)))
):
    return ShardingConfig.model_validate(
        {
            "default_shard": {"group": default[0], "member": default[1]},
            "groups": [
                {
                    "group": g,
                    "name": name,
                    "members": [
                        {
                            "member": m,
                            **({"name": "eu-1"} if (g, m) == (0, 0) else {}),
                            "configs": {
                                "primary-config": {"url": UNREACHABLE.format(f"g{g}m{m}")},
                                **(
                                    {"secondaryConfig": {"url": UNREACHABLE.format(f"r{g}m{m}")}}
                                    if replica
                                    else {}
                                ),
                                **(
                                    {
                                        "jobs-config": {
                                            "url": UNREACHABLE.format("jobs"),
                                            "maximum-pool-size": 2,
                                        }
                                    }
                                    if jobs
                                    else {}
                                ),
                            },
                        }
                        for m in members
                    ],
                }
                for g, name, members in groups
            ],
        }
    )


def test_from_config_builds_one_manager_per_member_in_config_order():
    with DatabaseRegistry.from_config(sharding()) as registry:
        assert registry.shards == (ShardIdentifier(0, 0), ShardIdentifier(0, 1), ShardIdentifier(1, 0))
        assert [m.shard for m in registry.transaction_managers()] == list(registry.shards)
        assert registry.default_shard == ShardIdentifier(0, 0)
        assert registry.shard_name(ShardIdentifier(0, 0)) == "global/eu-1"
        assert registry.shard_name(ShardIdentifier(0, 1)) == "global/member-1"
        assert registry.primary(ShardIdentifier(1, 0)).engine.url.database == "g1m0"
        assert all(m.dialect == "postgresql" for m in registry.transaction_managers())
        assert "hunter2" not in repr(registry)


def test_members_never_share_pools():
    with DatabaseRegistry.from_config(sharding()) as registry:
        primaries = [m.primary for m in registry.transaction_managers()]
        assert len({id(p) for p in primaries}) == 3


def test_without_a_replica_the_secondary_is_the_same_provider_object_and_is_closed_once(monkeypatch):
    registry = DatabaseRegistry.from_config(sharding())
    manager = registry.transaction_manager()
    assert manager.secondary is manager.primary
    assert registry.secondary() is registry.primary()
    closes = []
    original = ConnectionProvider.close
    monkeypatch.setattr(ConnectionProvider, "close", lambda self: (closes.append(self), original(self)))
    registry.close()
    assert len(closes) == len(set(map(id, closes))) == 3
    registry.close()  # idempotent
    assert len(closes) == 3


def test_a_replica_gets_its_own_provider():
    with DatabaseRegistry.from_config(sharding(replica=True)) as registry:
        assert registry.secondary() is not registry.primary()
        assert registry.secondary().engine.url.database == "r0m0"


def test_effective_shard_falls_back_to_the_default_for_unregistered_shards():
    with DatabaseRegistry.from_config(sharding(default=(1, 0))) as registry:
        assert registry.effective_shard(ShardIdentifier(0, 1)) == ShardIdentifier(0, 1)
        assert registry.effective_shard(ShardIdentifier(7, 7)) == ShardIdentifier(1, 0)
        assert registry.effective_shard(None) == ShardIdentifier(1, 0)
        with pytest.raises(LookupError, match=r"No database registered for shard \(7,7\)"):
            registry.transaction_manager(ShardIdentifier(7, 7))


@pytest.mark.parametrize(
    ("default", "fragment"), [((5, 0), "default-shard.group=5"), ((0, 9), "default-shard.member=9")]
)
def test_a_bad_default_shard_is_refused_before_any_pool_is_built(monkeypatch, default, fragment):
    built = []
    monkeypatch.setattr(ConnectionProvider, "__init__", lambda self, *a, **k: built.append(a))
    config = sharding().model_copy(
        update={
            "default_shard": sharding().default_shard.model_copy(
                update={"group": default[0], "member": default[1]}
            )
        }
    )
    with pytest.raises(ValueError, match=fragment):
        DatabaseRegistry.from_config(config)
    assert built == []


def test_a_bad_default_shard_is_already_refused_when_settings_are_validated():
    with pytest.raises(ValueError, match="default-shard must reference a configured database"):
        sharding(default=(3, 0))


def test_hand_built_registry_rules():
    def manager(g, m):
        return TransactionManager(ConnectionProvider.from_url("sqlite://"), shard=ShardIdentifier(g, m))

    with DatabaseRegistry([manager(0, 0)]) as single:
        assert single.default_shard == ShardIdentifier(0, 0)
    with pytest.raises(ValueError, match="no default_shard given"):
        DatabaseRegistry([manager(0, 0), manager(1, 0)])
    with pytest.raises(ValueError, match="at least one database"):
        DatabaseRegistry([])
    with pytest.raises(ValueError, match="must reference a registered database"):
        DatabaseRegistry([manager(0, 0)], default_shard=ShardIdentifier(2, 0))


def test_named_pools_are_built_on_first_request_and_reused():
    with DatabaseRegistry.from_config(sharding(jobs=True)) as registry:
        jobs = registry.provider("jobs-config")
        assert registry.provider("jobsConfig") is jobs is registry.provider("jobs_config")
        assert jobs.config.maximum_pool_size == 2
        assert jobs is not registry.primary()
        assert registry.provider("primary_config") is registry.primary()
        with pytest.raises(LookupError, match="no pool named 'lock_config'"):
            registry.provider("lock_config")


def test_jobs_pool_is_the_default_members_jobs_config():
    with DatabaseRegistry.from_config(sharding(jobs=True)) as registry:
        assert registry.jobs_provider() is registry.provider("jobs_config")
        assert registry.jobs_provider().engine.url.database == "jobs"


def test_without_jobs_config_the_primary_is_used_with_a_warning_naming_the_key(caplog):
    caplog.set_level(logging.WARNING)
    with DatabaseRegistry.from_config(sharding()) as registry:
        assert registry.jobs_provider() is registry.primary()
    assert "ekbatan.sharding.groups[0].members[0].configs.jobs-config is not set" in caplog.text
    assert "hunter2" not in caplog.text


def test_strict_jobs_pool_raises_the_message_naming_the_key():
    config = sharding(default=(1, 0))
    with (
        DatabaseRegistry.from_config(config) as registry,
        pytest.raises(JobsPoolNotConfiguredError) as raised,
    ):
        registry.jobs_provider(strict=True)
    assert "ekbatan.sharding.groups[1].members[0].configs.jobs-config" in str(raised.value)
    with pytest.raises(JobsPoolNotConfiguredError, match=r"groups\[1\]\.members\[0\]"):
        jobs_connection_provider(config, strict=True)


def misspelled(slot: str) -> ShardingConfig:
    config = sharding().model_dump(by_alias=True)
    member = config["groups"][0]["members"][0]
    member["configs"][slot] = {"url": UNREACHABLE.format("jobs"), "maximum-pool-size": 2}
    return ShardingConfig.model_validate(config)


@pytest.mark.parametrize("slot", ["job-config", "jobsConfig2", "jobs-conifg"])
def test_a_misspelled_jobs_config_is_named_in_the_fallback_warning_and_the_strict_error(slot, caplog):
    caplog.set_level(logging.WARNING)
    config = misspelled(slot)
    provider = jobs_connection_provider(config)
    provider.close()
    with DatabaseRegistry.from_config(config) as registry:
        assert registry.jobs_provider() is registry.primary()  # a custom slot, not the jobs pool
    hint = "did you mean jobs-config instead of "
    warnings = [r.getMessage() for r in caplog.records if "jobs-config is not set" in r.getMessage()]
    assert len(warnings) == 2 and all(hint in w for w in warnings), warnings
    with pytest.raises(JobsPoolNotConfiguredError, match=hint):
        jobs_connection_provider(config, strict=True)


def test_a_custom_slot_that_is_no_near_miss_gets_no_hint(caplog):
    caplog.set_level(logging.WARNING)
    jobs_connection_provider(misspelled("reporting-config")).close()
    assert "jobs-config is not set" in caplog.text
    assert "did you mean" not in caplog.text


def test_standalone_jobs_provider_falls_back_to_primary_config(caplog):
    provider = jobs_connection_provider(sharding())
    try:
        assert provider.engine.url.database == "g0m0"
        assert "jobs-config is not set" in caplog.text
    finally:
        provider.close()
    provider = jobs_connection_provider(sharding(jobs=True))
    try:
        assert provider.engine.url.database == "jobs"
    finally:
        provider.close()


def refused_url(dialect: str) -> str:
    """A URL the real server refuses at the first connection: PostgreSQL trusts every user
    here, so an unknown database; MariaDB knows no user ``nosuchuser``."""
    if dialect == "postgres":
        return server_url(dialect, "no_such_database")
    return sa.make_url(server_url(dialect)).set(username="nosuchuser").render_as_string(hide_password=False)


@pytest.mark.dialects("postgres", "mariadb", "mysql")
def test_a_refused_first_connection_names_the_configuration_key(dialect):
    url = refused_url(dialect)
    config = ShardingConfig.model_validate(
        {
            "default_shard": {"group": 1, "member": 0},
            "groups": [
                {
                    "group": 0,
                    "name": "global",
                    "members": [{"member": 0, "configs": {"primary-config": {"url": url}}}],
                },
                {
                    "group": 1,
                    "name": "mexico",
                    "members": [
                        {
                            "member": 0,
                            "configs": {
                                "primary-config": {"url": url},
                                "secondary-config": {"url": url},
                                "jobs-config": {"url": url, "password": ""},
                                "reportingConfig": {"url": url},
                            },
                        }
                    ],
                },
            ],
        }
    )
    mexico = "ekbatan.sharding.groups[1].members[0].configs"
    with DatabaseRegistry.from_config(config) as registry:
        expected = [
            (registry.primary, f"{mexico}.primary-config (mexico/member-0 primary)"),
            (registry.secondary, f"{mexico}.secondary-config (mexico/member-0 secondary)"),
            (registry.jobs_provider, f"{mexico}.jobs-config (mexico/member-0 jobs_config)"),
            (lambda: registry.provider("reporting-config"), f"{mexico}.reporting-config"),
            (
                lambda: registry.primary(ShardIdentifier(0, 0)),
                "ekbatan.sharding.groups[0].members[0].configs.primary-config",
            ),
        ]
        for provider, where in expected:
            with pytest.raises(sa.exc.OperationalError) as raised:
                provider().connect()
            assert f"connecting {where}" in str(raised.value)
    standalone = jobs_connection_provider(config)
    try:
        with pytest.raises(sa.exc.OperationalError) as raised:
            standalone.connect()
        assert f"connecting {mexico}.jobs-config (jobs) to" in str(raised.value)
    finally:
        standalone.close()
    with pytest.raises(MigrationError) as failed:
        migrate(config)
    assert "connecting ekbatan.sharding.groups[0].members[0].configs.primary-config" in str(failed.value)
