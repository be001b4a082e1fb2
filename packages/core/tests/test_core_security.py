"""A password set anywhere — inside the URL, as ``password``, through a ``${PLACEHOLDER}`` or an
``EKBATAN_…`` override — never reaches a repr, a log line or an exception (with its causes)."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ekbatan.core import ConnectionProvider, DataSourceConfig, SettingsError, load_settings
from ekbatan.core.sharding import DatabaseRegistry

SECRET = "s3cr3t-XYZ"
# Nothing listens on port 1: connecting fails at once with "connection refused".
REFUSED = {
    "postgres": "postgresql+psycopg://app{auth}@127.0.0.1:1/app",
    "mariadb": "mariadb+pymysql://app{auth}@127.0.0.1:1/app",
}


def chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]


def texts_of(error: BaseException) -> list[str]:
    return [t for e in chain(error) for t in (str(e), repr(e), *map(str, getattr(e, "args", ())))]


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text, text


def yml(tmp_path: Path, url: str, password_line: str = "") -> Path:
    path = tmp_path / "application.yml"
    path.write_text(
        textwrap.dedent(
            f"""
            ekbatan:
              sharding:
                default-shard: {{group: 0, member: 0}}
                groups:
                  - group: 0
                    name: global
                    members:
                      - member: 0
                        configs:
                          primary-config:
                            url: "{url}"
                            {password_line}
                          jobs-config:
                            url: "{url}"
                            {password_line}
            """
        )
    )
    return path


@pytest.fixture(params=["in-url", "password-key", "placeholder", "environment"])
def settings_with_secret(request, tmp_path):
    """Settings whose pools carry the secret, each way a password can be given."""
    base = REFUSED["postgres"]
    if request.param == "in-url":
        return load_settings(yml(tmp_path, base.format(auth=f":{SECRET}")), environ={})
    if request.param == "password-key":
        return load_settings(yml(tmp_path, base.format(auth=""), f'password: "{SECRET}"'), environ={})
    if request.param == "placeholder":
        path = yml(tmp_path, base.format(auth=""), 'password: "${DB_PASSWORD}"')
        return load_settings(path, environ={"DB_PASSWORD": SECRET})
    prefix = "EKBATAN_SHARDING_GROUPS_0__MEMBERS_0__CONFIGS_"
    environ = {f"{prefix}PRIMARY_CONFIG_PASSWORD": SECRET, f"{prefix}JOBS_CONFIG_PASSWORD": SECRET}
    return load_settings(yml(tmp_path, base.format(auth="")), environ=environ)


def test_settings_registry_providers_and_managers_never_show_the_password(settings_with_secret, caplog):
    caplog.set_level(logging.DEBUG)
    settings = settings_with_secret
    member = settings.sharding.groups[0].members[0]
    config = member.primary_config
    assert config.sqlalchemy_url().password == SECRET, (
        "the secret must be in use for this test to mean anything"
    )

    with DatabaseRegistry.from_config(settings.sharding) as registry:
        providers = [registry.primary(), registry.secondary(), registry.jobs_provider()]
        managers = registry.transaction_managers()
        shown = [repr(settings), str(settings), repr(member), repr(config), str(config), config.safe_url()]
        shown += [settings.model_dump_json(), repr(settings.model_dump())]
        shown += [repr(registry), str(registry)]
        shown += [t for p in providers for t in (repr(p), str(p), p.url, repr(p.config), repr(p.engine))]
        shown += [str(p.engine.url) for p in providers]
        shown += [t for m in managers for t in (repr(m), str(m))]
        assert_no_secret(*shown)

        # Connecting fails (nothing listens); the error names the pool, not the password.
        with pytest.raises(sa.exc.OperationalError) as raised, registry.jobs_provider().connect():
            pass
        assert_no_secret(*texts_of(raised.value))
        assert "jobs-config" in str(raised.value)
        with pytest.raises(sa.exc.OperationalError) as raised, registry.transaction():
            pass
        assert_no_secret(*texts_of(raised.value))
    assert_no_secret(caplog.text, *(r.getMessage() for r in caplog.records))


@pytest.mark.parametrize("dialect_url", sorted(REFUSED))
def test_a_refused_connection_never_echoes_the_password(dialect_url, caplog):
    caplog.set_level(logging.DEBUG)
    provider = ConnectionProvider.from_url(REFUSED[dialect_url].format(auth=f":{SECRET}"), name="orders")
    try:
        with pytest.raises(sa.exc.OperationalError) as raised, provider.connect():
            pass
        assert_no_secret(*texts_of(raised.value), repr(provider), provider.url)
    finally:
        provider.close()
    assert_no_secret(caplog.text)


def test_a_wrong_password_on_a_real_server_is_reported_without_it(caplog):
    # MariaDB's root has no password here, so any password is wrong: a real login refusal.
    caplog.set_level(logging.DEBUG)
    provider = ConnectionProvider.from_url(f"mariadb+pymysql://root:{SECRET}@127.0.0.1:3306/mysql", name="x")
    try:
        with pytest.raises(sa.exc.OperationalError) as raised, provider.connect():
            pass
        assert "Access denied" in str(raised.value)
        assert_no_secret(*texts_of(raised.value))
    finally:
        provider.close()
    assert_no_secret(caplog.text)


@pytest.mark.parametrize(
    "url, password_line",
    [
        # A URL that does not parse, carrying the secret.
        (f"not a url://app:{SECRET}@db/app", ""),
        # A misspelled key holding the secret as its value.
        ("postgresql+psycopg://app@db/app", f'passwrd: "{SECRET}"'),
        # The secret both inside the URL and as password.
        (f"postgresql+psycopg://app:{SECRET}@db/app", f'password: "{SECRET}"'),
        # A wrong type next to the secret.
        (f"postgresql+psycopg://app:{SECRET}@db/app", "maximum-pool-size: lots"),
    ],
)
def test_settings_errors_never_echo_the_password(tmp_path, url, password_line):
    with pytest.raises(SettingsError) as raised:
        load_settings(yml(tmp_path, url, password_line), environ={})
    assert_no_secret(*texts_of(raised.value))


def test_a_data_source_config_error_never_echoes_the_password():
    for kwargs in (
        {"url": f"nonsense://app:{SECRET}@db/app"},
        {"url": f"postgresql+psycopg://app:{SECRET}@db/app", "password": SECRET},
        {"url": f"postgresql+psycopg://app:{SECRET}@db/app", "maximum_pool_size": "lots"},
        {"jdbc_url": f"jdbc:postgresql://db/app?password={SECRET}&bad=%zz", "password": SECRET},
    ):
        with pytest.raises(Exception) as raised:
            config = DataSourceConfig(**kwargs)
            config.sqlalchemy_url()
            ConnectionProvider(config)
        assert_no_secret(*texts_of(raised.value))
