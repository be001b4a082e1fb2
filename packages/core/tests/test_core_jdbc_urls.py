import pytest

from ekbatan.core import DataSourceConfig, DialectName, dialect_name_from_jdbc_url, translate_jdbc_url
from ekbatan.core.persistence import UnsupportedJdbcUrlError


def rendered(jdbc_url):
    return translate_jdbc_url(jdbc_url).url.render_as_string(hide_password=False)


@pytest.mark.parametrize(
    ("jdbc_url", "expected"),
    [
        ("jdbc:postgresql://db:5432/app", "postgresql+psycopg://db:5432/app"),
        ("jdbc:postgresql://db/app", "postgresql+psycopg://db:5432/app"),
        ("jdbc:postgresql:app", "postgresql+psycopg://localhost:5432/app"),
        (
            "jdbc:postgresql://db:5432/app?user=app&password=pw&currentSchema=billing&ApplicationName=svc",
            "postgresql+psycopg://app:pw@db:5432/app?application_name=svc&options=-csearch_path%3Dbilling",
        ),
        ("jdbc:mysql://db:3306/app", "mysql+pymysql://db:3306/app"),
        (
            "jdbc:mysql://db/app?serverTimezone=UTC&characterEncoding=UTF-8",
            "mysql+pymysql://db:3306/app?charset=utf8mb4",
        ),
        ("jdbc:mysql:aurora://cluster.local:3306/app", "mysql+pymysql://cluster.local:3306/app"),
        ("jdbc:mariadb://mysql-01:3306/app", "mariadb+pymysql://mysql-01:3306/app"),
        ("jdbc:mariadb://app:secret@db/app", "mariadb+pymysql://app:secret@db:3306/app"),
        ("jdbc:sqlite:/var/lib/app.sqlite", "sqlite:////var/lib/app.sqlite"),
        ("jdbc:sqlite::memory:", "sqlite://"),
    ],
)
def test_jdbc_urls_translate_to_sqlalchemy_urls_with_the_python_driver(jdbc_url, expected):
    assert rendered(jdbc_url) == expected


def test_postgres_multi_host_becomes_a_psycopg_host_list():
    url = translate_jdbc_url("jdbc:postgresql://h1:5432,h2:5433/app?targetServerType=primary").url
    assert url.host is None
    assert url.query["host"] == ("h1:5432", "h2:5433")
    assert url.query["target_session_attrs"] == "primary"
    import sqlalchemy as sa

    engine = sa.create_engine(url)  # psycopg accepts it without connecting
    _, kwargs = engine.dialect.create_connect_args(engine.url)
    assert (kwargs["host"], kwargs["port"]) == ("h1,h2", "5432,5433")
    engine.dispose()


@pytest.mark.parametrize(
    ("jdbc_url", "expected_dialect"),
    [
        ("jdbc:postgresql://h/db", DialectName.POSTGRESQL),
        ("jdbc:mysql://mariadb-host/db", DialectName.MYSQL),
        ("jdbc:mariadb://mysql-01/app", DialectName.MARIADB),
        ("jdbc:mysql:aurora://h/db", DialectName.MYSQL),
        ("jdbc:mariadb:sequential://h1,h2/db", DialectName.MARIADB),
        ("jdbc:mysql:loadbalance://h1,h2/db", DialectName.MYSQL),
        ("JDBC:PostgreSQL://h/db", DialectName.POSTGRESQL),
    ],
)
def test_dialect_comes_from_the_scheme_only(jdbc_url, expected_dialect):
    assert dialect_name_from_jdbc_url(jdbc_url) is expected_dialect


def test_multi_host_mysql_family_urls_are_refused_because_pymysql_takes_one_host():
    with pytest.raises(UnsupportedJdbcUrlError, match="PyMySQL connects to exactly one"):
        translate_jdbc_url("jdbc:mariadb:sequential://h1,h2/db")


@pytest.mark.parametrize(
    ("jdbc_url", "fragment"),
    [
        ("jdbc:h2:mem:test", "'h2'"),
        ("jdbc:oracle:thin:@db:1521/x", "'oracle'"),
        ("jdbc:sqlserver://db;databaseName=x", "'sqlserver'"),
        ("postgresql://db/app", "not a JDBC URL"),
        ("jdbc:", "cannot determine"),
        ("jdbc:postgresql://db/app?sslfactory=x", "'sslfactory'"),
        ("jdbc:mysql://db/app?serverTimezone=Europe/Paris", "serverTimezone=UTC"),
        ("jdbc:mariadb://address=(host=a)(port=3306)/db", "address=(host=…)"),
    ],
)
def test_unsupported_urls_and_parameters_are_refused_by_name(jdbc_url, fragment):
    with pytest.raises(UnsupportedJdbcUrlError) as raised:
        translate_jdbc_url(jdbc_url)
    assert fragment in str(raised.value)


def test_unsupported_family_error_lists_what_is_supported():
    with pytest.raises(UnsupportedJdbcUrlError) as raised:
        translate_jdbc_url("jdbc:h2:mem:test")
    assert "postgresql, mysql, mariadb" in str(raised.value)


def test_a_jdbc_password_is_moved_into_the_secret_and_masked_everywhere():
    config = DataSourceConfig(jdbc_url="jdbc:postgresql://db/app?user=app&password=hunter2")
    assert config.password.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(config) and "hunter2" not in str(config)
    assert "hunter2" not in config.jdbc_url
    assert config.sqlalchemy_url().password == "hunter2"
    assert config.sqlalchemy_url().username == "app"
    with pytest.raises(ValueError) as raised:
        DataSourceConfig(jdbc_url="jdbc:postgresql://db/app?password=hunter2&bogus=1")
    assert "hunter2" not in str(raised.value)
