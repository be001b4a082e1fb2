import pytest
from pydantic import ValidationError

from ekbatan.core import ConnectionProvider, DataSourceConfig, DialectName, dialect_name_from_url
from ekbatan.core.persistence import mask_url_password


@pytest.mark.parametrize(
    ("url", "expected_dialect"),
    [
        ("postgresql+psycopg://u@h/db", DialectName.POSTGRESQL),
        ("postgresql://u@mysql-01/db", DialectName.POSTGRESQL),
        ("mariadb+pymysql://u@postgres-host/db", DialectName.MARIADB),
        ("mysql+pymysql://u@mariadb-host/db", DialectName.MYSQL),
        ("sqlite:///x.sqlite", DialectName.SQLITE),
        ("sqlite://", DialectName.SQLITE),
    ],
)
def test_dialect_from_the_url_scheme_never_from_host_or_database_names(url, expected_dialect):
    assert dialect_name_from_url(url) is expected_dialect
    assert DataSourceConfig(url=url).dialect is expected_dialect


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("oracle+oracledb://u@h/db", "Ekbatan supports postgresql, mariadb, mysql, sqlite"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("not a url", "is not a SQLAlchemy URL"),
    ],
)
def test_unsupported_urls_are_refused_with_what_to_write(url, fragment):
    with pytest.raises(ValidationError) as raised:
        DataSourceConfig(url=url)
    assert fragment in str(raised.value)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({}, "give url"),
        ({"url": "sqlite://", "jdbc_url": "jdbc:sqlite::memory:"}, "not both"),
        ({"url": "  "}, "url is blank"),
        ({"url": "sqlite://", "username": " "}, "username is blank"),
        ({"url": "sqlite://", "maximum_pool_size": 0}, "greater than or equal to 1"),
        (
            {"url": "sqlite://", "maximum_pool_size": 2, "minimum_idle": 3},
            "must not exceed maximum-pool-size (2)",
        ),
        ({"url": "sqlite://", "minimum_idle": -1}, "greater than or equal to 0"),
        ({"url": "sqlite://", "idle_timeout": -1}, "greater than or equal to 0"),
        ({"url": "sqlite://", "leak_detection_threshold": 1999}, "write 0 (off) or at least 2000"),
        ({"url": "sqlite://", "connection_timeout": 0}, "greater than 0"),
        ({"url": "sqlite://", "pool_size": 3}, "Extra inputs are not permitted"),
    ],
)
def test_validation_rules(fields, fragment):
    with pytest.raises(ValidationError) as raised:
        DataSourceConfig(**fields)
    assert fragment in str(raised.value)


def test_defaults_and_accepted_edges():
    config = DataSourceConfig(url="sqlite://")
    assert config.maximum_pool_size == 10
    assert config.minimum_idle is None
    assert DataSourceConfig(url="sqlite://", leak_detection_threshold=0).leak_detection_threshold == 0
    assert DataSourceConfig(url="sqlite://", leak_detection_threshold=2000).leak_detection_threshold == 2000
    assert DataSourceConfig(url="sqlite://", minimum_idle=10).minimum_idle == 10
    assert DataSourceConfig(url="postgresql+psycopg://u@h/db", password="").password.get_secret_value() == ""


def test_username_and_password_keys_override_the_url():
    config = DataSourceConfig(url="postgresql+psycopg://url-user@h/db", username="app", password="s3cret")
    url = config.sqlalchemy_url()
    assert (url.username, url.password) == ("app", "s3cret")
    assert config.safe_url() == "postgresql+psycopg://app:***@h/db"


def test_an_empty_password_prints_as_no_password_not_as_a_mask():
    config = DataSourceConfig(url="postgresql+psycopg://postgres@h/db", password="")  # ${PG_PASSWORD:}
    assert config.sqlalchemy_url().password == ""  # still passed to the driver as given
    assert config.safe_url() == "postgresql+psycopg://postgres@h/db"
    provider = ConnectionProvider(config, name="jobs")
    try:
        assert provider.url == "postgresql+psycopg://postgres@h/db"
        assert "***" not in repr(provider)
    finally:
        provider.close()
    assert (
        mask_url_password("failed on postgresql://postgres:@h/db") == "failed on postgresql://postgres:@h/db"
    )
    assert mask_url_password("failed on postgresql://postgres:pw@h/db?password=x") == (
        "failed on postgresql://postgres:***@h/db?password=***"
    )


def test_a_password_in_two_places_is_refused_without_echoing_it():
    with pytest.raises(ValidationError) as raised:
        DataSourceConfig(url="postgresql+psycopg://u:hunter2@h/db", password="other-secret")
    assert "keep one" in str(raised.value)
    assert "hunter2" not in str(raised.value) and "other-secret" not in str(raised.value)


def test_validation_errors_never_echo_the_input():
    with pytest.raises(ValidationError) as raised:
        DataSourceConfig(url="oracle://u:hunter2@h/db", password="hunter3", maximum_pool_size=0)
    assert "hunter2" not in str(raised.value) and "hunter3" not in str(raised.value)
    assert "hunter2" not in repr(raised.value.errors())
