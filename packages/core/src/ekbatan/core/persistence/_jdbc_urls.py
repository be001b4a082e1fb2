"""Translating JDBC URLs (as written in Java Ekbatan configs) into SQLAlchemy URLs.

The family comes from the scheme alone (``jdbc:mariadb://mysql-01/app`` is MariaDB), the
driver is fixed per family (psycopg 3 for PostgreSQL, PyMySQL for MySQL and MariaDB), and
JDBC parameters are translated only where a Python equivalent exists: anything else is
refused by name rather than silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

import sqlalchemy as sa

from ekbatan.core.persistence._credentials import mask_url_password
from ekbatan.core.persistence._dialect_names import DialectName

_DRIVERNAMES = {
    DialectName.POSTGRESQL: "postgresql+psycopg",
    DialectName.MARIADB: "mariadb+pymysql",
    DialectName.MYSQL: "mysql+pymysql",
    DialectName.SQLITE: "sqlite",
}
_FAMILIES = {
    "postgresql": DialectName.POSTGRESQL,
    "pgsql": DialectName.POSTGRESQL,
    "mariadb": DialectName.MARIADB,
    "mysql": DialectName.MYSQL,
    "sqlite": DialectName.SQLITE,
}
_DEFAULT_PORTS = {DialectName.POSTGRESQL: 5432, DialectName.MARIADB: 3306, DialectName.MYSQL: 3306}
_SERVER_URL = re.compile(
    r"^jdbc:(?P<family>[A-Za-z0-9]+)(?::(?P<sub>[A-Za-z:]+))?://"
    r"(?P<authority>[^/?]*)(?:/(?P<database>[^?;]*))?(?:[?;](?P<query>.*))?$",
    re.IGNORECASE,
)
_UTC_NAMES = {"utc", "z", "gmt", "+00:00", "etc/utc", "utc+0", "gmt+0"}


class UnsupportedJdbcUrlError(ValueError):
    """A JDBC URL that cannot be turned into a SQLAlchemy URL; the message says what to write."""


@dataclass(frozen=True)
class TranslatedJdbcUrl:
    dialect: DialectName
    url: sa.URL  # carries username/password when the JDBC URL did


def dialect_name_from_jdbc_url(jdbc_url: str) -> DialectName:
    """The dialect family of a JDBC URL, from its scheme only."""
    family = _family_token(jdbc_url)
    return _dialect_for_family(family, jdbc_url)


def translate_jdbc_url(jdbc_url: str) -> TranslatedJdbcUrl:
    """``jdbc:postgresql://h:5432/db`` → ``postgresql+psycopg://h:5432/db`` (and friends)."""
    dialect = dialect_name_from_jdbc_url(jdbc_url)
    if dialect is DialectName.SQLITE:
        return _translate_sqlite(jdbc_url)
    match = _SERVER_URL.match(jdbc_url.strip())
    if match is None:
        if dialect is DialectName.POSTGRESQL and re.match(r"^jdbc:postgresql:[^/]", jdbc_url, re.IGNORECASE):
            # jdbc:postgresql:dbname means localhost:5432/dbname
            rest = jdbc_url.split(":", 2)[2]
            return translate_jdbc_url(f"jdbc:postgresql://localhost:5432/{rest}")
        raise UnsupportedJdbcUrlError(
            f"cannot read JDBC URL {_shown(jdbc_url)}; write it as jdbc:<family>://host:port/database"
        )
    authority = match["authority"]
    username = password = None
    if "@" in authority:
        userinfo, authority = authority.rsplit("@", 1)
        username, _, raw_password = userinfo.partition(":")
        username, password = unquote(username), (unquote(raw_password) if raw_password else None)
    hosts = [h.strip() for h in authority.split(",") if h.strip()]
    if any(h.startswith("(") or h.lower().startswith("address=") for h in hosts):
        raise UnsupportedJdbcUrlError(
            f"JDBC URL {_shown(jdbc_url)} uses the address=(host=…)(port=…) form; "
            f"write plain host:port entries (or use url: with a SQLAlchemy URL)"
        )
    if not hosts:
        hosts = ["localhost"]
    database = unquote(match["database"] or "") or None
    query = _query_pairs(match["query"])
    params: dict[str, list[str]] = {}
    for key, value in query:
        lowered = key.lower()
        if lowered == "user":
            username = value
        elif lowered == "password":
            password = value
        elif dialect is DialectName.POSTGRESQL:
            _translate_postgres_parameter(key, value, params, jdbc_url)
        else:
            _translate_mysql_parameter(key, value, params, jdbc_url)

    host: str | None
    port: int | None
    if len(hosts) == 1:
        host, port = _split_host_port(hosts[0], dialect, jdbc_url)
    elif dialect is DialectName.POSTGRESQL:
        # psycopg/libpq try the hosts in order, as the PostgreSQL JDBC driver does
        params["host"] = [":".join(map(str, _split_host_port(h, dialect, jdbc_url))) for h in hosts]
        host = port = None
    else:
        raise UnsupportedJdbcUrlError(
            f"JDBC URL {_shown(jdbc_url)} lists {len(hosts)} hosts, but PyMySQL connects to exactly one; "
            f"write a single host (a proxy or virtual IP in front of the cluster), e.g. "
            f"jdbc:{dialect.value}://{hosts[0]}/{database or 'app'}"
        )
    url = sa.URL.create(
        _DRIVERNAMES[dialect],
        username=username or None,
        password=password,
        host=host,
        port=port,
        database=database,
        query={k: tuple(v) if len(v) > 1 else v[0] for k, v in params.items()},
    )
    return TranslatedJdbcUrl(dialect, url)


def _family_token(jdbc_url: str) -> str:
    text = jdbc_url.strip()
    if not text.lower().startswith("jdbc:"):
        raise UnsupportedJdbcUrlError(
            f"{_shown(text)} is not a JDBC URL (it must start with 'jdbc:'); "
            f"put a SQLAlchemy URL under url: instead of jdbc-url:"
        )
    return re.split(r"[:/]", text[5:], maxsplit=1)[0].lower()


def _dialect_for_family(family: str, jdbc_url: str) -> DialectName:
    if family in _FAMILIES:
        return _FAMILIES[family]
    if not family:
        raise UnsupportedJdbcUrlError(f"cannot determine the database dialect of JDBC URL {_shown(jdbc_url)}")
    raise UnsupportedJdbcUrlError(
        f"JDBC URL {_shown(jdbc_url)} names the database family {family!r}, which Ekbatan does not support; "
        f"supported: postgresql, mysql, mariadb, sqlite (e.g. jdbc:postgresql://host:5432/app)"
    )


def _translate_sqlite(jdbc_url: str) -> TranslatedJdbcUrl:
    path = jdbc_url.strip()[len("jdbc:sqlite:") :]
    path = path.split("?", 1)[0]
    if path in ("", ":memory:"):
        return TranslatedJdbcUrl(DialectName.SQLITE, sa.make_url("sqlite://"))
    if path.startswith("file:"):
        path = path[len("file:") :]
    return TranslatedJdbcUrl(DialectName.SQLITE, sa.URL.create("sqlite", database=path))


def _query_pairs(query: str | None) -> list[tuple[str, str]]:
    if not query:
        return []
    return parse_qsl(query.replace(";", "&"), keep_blank_values=True)


def _split_host_port(entry: str, dialect: DialectName, jdbc_url: str) -> tuple[str, int]:
    if entry.startswith("["):  # [ipv6]:port
        host, _, rest = entry[1:].partition("]")
        port_text = rest.lstrip(":")
    else:
        host, _, port_text = entry.partition(":")
    if not port_text:
        return host, _DEFAULT_PORTS[dialect]
    if not port_text.isdigit():
        raise UnsupportedJdbcUrlError(f"JDBC URL {_shown(jdbc_url)}: port {port_text!r} is not a number")
    return host, int(port_text)


def _translate_postgres_parameter(key: str, value: str, params: dict[str, list[str]], jdbc_url: str) -> None:
    lowered = key.lower()
    if lowered == "currentschema":
        params.setdefault("options", []).append(f"-csearch_path={value}")
    elif lowered == "applicationname":
        params["application_name"] = [value]
    elif lowered in ("sslmode", "sslrootcert", "sslcert", "sslkey", "options"):
        params.setdefault(lowered, []).append(value)
    elif lowered in ("connecttimeout", "logintimeout"):
        params["connect_timeout"] = [value]  # seconds in both worlds
    elif lowered == "targetservertype":
        mapped = {
            "any": "any",
            "primary": "primary",
            "master": "primary",
            "secondary": "standby",
            "preferSecondary".lower(): "prefer-standby",
        }.get(value.lower())
        if mapped is None:
            raise _unknown_parameter(key, value, jdbc_url)
        params["target_session_attrs"] = [mapped]
    else:
        raise _unknown_parameter(key, value, jdbc_url)


def _translate_mysql_parameter(key: str, value: str, params: dict[str, list[str]], jdbc_url: str) -> None:
    lowered = key.lower()
    if lowered == "servertimezone":
        # Ekbatan pins every MySQL/MariaDB session to +00:00; anything else would contradict it.
        if value.lower() not in _UTC_NAMES:
            raise UnsupportedJdbcUrlError(
                f"JDBC URL {_shown(jdbc_url)} sets serverTimezone={value}; Ekbatan always runs "
                f"MySQL/MariaDB sessions in UTC (+00:00): remove the parameter or write serverTimezone=UTC"
            )
    elif lowered == "characterencoding":
        charset = value.lower().replace("-", "")
        params["charset"] = ["utf8mb4" if charset in ("utf8", "utf8mb4") else value]
    elif lowered == "useunicode":
        pass  # PyMySQL always speaks Unicode
    elif lowered == "connecttimeout":
        if not value.isdigit():
            raise _unknown_parameter(key, value, jdbc_url)
        params["connect_timeout"] = [str(max(1, round(int(value) / 1000)))]  # JDBC: ms, PyMySQL: s
    else:
        raise _unknown_parameter(key, value, jdbc_url)


def _unknown_parameter(key: str, value: str, jdbc_url: str) -> UnsupportedJdbcUrlError:
    return UnsupportedJdbcUrlError(
        f"JDBC URL {_shown(jdbc_url)}: parameter {key!r} has no Python equivalent here; remove it or "
        f"write the connection as url: with a SQLAlchemy URL and the driver's own parameters"
    )


def _shown(text: str) -> str:
    return repr(mask_url_password(text))
