"""Which databases a command works on: every shard of an ``application.yml``, or one ``--url``.

Pools are opened by the commands through :meth:`Pool.open`, which turns a failed connection
into one line naming the pool, its key in the configuration and its password-masked URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click
import sqlalchemy as sa

from ekbatan.core import DataSourceConfig, DialectName, EkbatanSettings, load_settings
from ekbatan.core.config import kebab_spelling
from ekbatan.core.migrations import DEFAULT_EVENTLOG_SCHEMA, eventlog_tables
from ekbatan.core.persistence import ConnectionProvider, mask_url_password
from ekbatan.core.sharding import JOBS_CONFIG, PRIMARY_CONFIG, ShardIdentifier, pool_config_key, target_name
from ekbatan.distributed_jobs.scheduler import (
    DEFAULT_TABLE_NAME,
    held_table_name,
    history_table_name,
    pauses_table_name,
)
from ekbatan.local_event_handler import notifications_table

__all__ = ["CliError", "Pool", "Shard", "Target", "resolve_target"]

DEFAULT_CONFIG = "application.yml"
#: seconds a command waits for a server to accept a connection before it reports it unreachable
CONNECT_TIMEOUT = 10


class CliError(Exception):
    """A failure the command reports as one line; ``exit_code`` 1 unless the usage was wrong."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def first_line(error: BaseException) -> str:
    """The error's message on one line, with any password in a URL masked."""
    text = " ".join(str(error).split())
    return mask_url_password(text) or type(error).__name__


@dataclass(frozen=True)
class Pool:
    """One configured pool: which shard, which slot (``primary-config``...), its settings."""

    shard: str
    slot: str
    config: DataSourceConfig
    config_path: str | None = None

    @property
    def dialect(self) -> DialectName:
        return self.config.dialect

    @property
    def url(self) -> str:
        return self.config.safe_url()

    @property
    def label(self) -> str:
        return f"{self.shard} {self.slot}"

    def open(self, *, create: bool = False) -> ConnectionProvider:
        """A provider for this pool; the caller closes it. Connects to nothing yet.

        A SQLite file that does not exist is refused unless ``create``: connecting would
        create an empty file where a typo in the path was meant.
        """
        url = self.config.sqlalchemy_url()
        options: dict[str, object] = {}
        if self.dialect is DialectName.SQLITE:
            path = url.database
            if not create and path not in (None, "", ":memory:") and not Path(path).exists():
                raise CliError(
                    f"no SQLite database at {path} ({self.label}); check the path, or run "
                    f"ekbatan migrate to create it"
                )
        else:
            options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT}
        return ConnectionProvider(self.config, name=self.label, config_path=self.config_path, **options)

    def connect(self, provider: ConnectionProvider) -> sa.Connection:
        """A connection from ``provider``, or a :class:`CliError` saying why there is none."""
        try:
            return provider.connect()
        except sa.exc.DBAPIError as error:
            raise self.unreachable(error) from error

    def unreachable(self, error: sa.exc.DBAPIError) -> CliError:
        where = f" ({self.config_path})" if self.config_path else ""
        cause = first_line(error.orig) if error.orig is not None else first_line(error)
        return CliError(
            f"cannot connect to {self.label} at {self.url}: {cause.rstrip('. ')}; check that the server is running "
            f"and that the host, port, database, user and password{where} are right"
        )


@dataclass(frozen=True)
class Shard:
    """One database of the configuration: its pools (primary first) and its eventlog name."""

    name: str
    pools: tuple[Pool, ...]
    eventlog_schema: str = DEFAULT_EVENTLOG_SCHEMA

    @property
    def primary(self) -> Pool:
        return self.pools[0]


@dataclass(frozen=True)
class Target:
    """What a command was pointed at."""

    source: str
    settings: EkbatanSettings | None
    shards: tuple[Shard, ...]
    jobs: Pool
    jobs_fallback: bool = False

    @property
    def option(self) -> str:
        """The option that names this target again, for messages such as "run ekbatan migrate ..."."""
        if self.settings is not None:
            return f"--config {self.source}"
        return f"--url {self.source}"

    def missing_table(self, table: str, pool: Pool) -> CliError:
        return CliError(
            f"table {table} does not exist on {pool.label} ({pool.url}); "
            f"run ekbatan migrate {self.option} to create the framework tables"
        )

    def require_eventlog(self, connection: sa.Connection, shard: Shard) -> None:
        dialect, schema = shard.primary.dialect, shard.eventlog_schema
        inspector = sa.inspect(connection)
        for table in (eventlog_tables(dialect, schema).events, notifications_table(dialect, schema)):
            if not inspector.has_table(table.name, schema=table.schema):
                raise self.missing_table(table.fullname, shard.primary)

    def require_scheduled_tasks(self, connection: sa.Connection, *, companions: bool = False) -> None:
        """``scheduled_tasks`` exists (and, with ``companions``, its held, pauses and history tables)."""
        inspector = sa.inspect(connection)
        tables = [DEFAULT_TABLE_NAME]
        if companions:
            tables += [
                held_table_name(DEFAULT_TABLE_NAME),
                pauses_table_name(DEFAULT_TABLE_NAME),
                history_table_name(DEFAULT_TABLE_NAME),
            ]
        for table in tables:
            if not inspector.has_table(table):
                raise self.missing_table(table, self.jobs)


def resolve_target(config: str | None, url: str | None, eventlog_schema: str | None) -> Target:
    """``--url`` (one database) or ``--config`` (default: ``$EKBATAN_CONFIG``, else ./application.yml)."""
    if config and url:
        raise click.UsageError("give either --config or --url, not both")
    if url:
        return _url_target(url, eventlog_schema or DEFAULT_EVENTLOG_SCHEMA)
    if eventlog_schema:
        raise click.UsageError(
            "--eventlog-schema goes with --url; with --config each member's eventlog-schema is used"
        )
    if not config:
        if not Path(DEFAULT_CONFIG).exists():
            raise click.UsageError(
                f"no configuration: pass --config PATH (or set EKBATAN_CONFIG) or --url URL; "
                f"there is no {DEFAULT_CONFIG} in {os.getcwd()}"
            )
        config = DEFAULT_CONFIG
    return config_target(load_settings(Path(config)), config)


def _url_target(url: str, eventlog_schema: str) -> Target:
    try:
        data_source = DataSourceConfig(url=url)
        eventlog_tables(data_source.dialect, eventlog_schema)  # validates the name
    except ValueError as error:
        raise click.BadParameter(first_line(error), param_hint="--url / --eventlog-schema") from None
    pool = Pool("database", kebab_spelling(PRIMARY_CONFIG), data_source)
    return Target(data_source.safe_url(), None, (Shard("database", (pool,), eventlog_schema),), pool)


def config_target(settings: EkbatanSettings, source: str) -> Target:
    """Every member of ``ekbatan.sharding`` with every pool it configures."""
    sharding = settings.sharding
    shards: list[Shard] = []
    jobs: Pool | None = None
    fallback = False
    for group, member in sharding.members():
        name = target_name(group, member)
        ident = ShardIdentifier(group.group, member.member)
        slots = [PRIMARY_CONFIG] + [slot for slot in member.configs if slot != PRIMARY_CONFIG]
        pools = tuple(
            Pool(name, kebab_spelling(slot), member.configs[slot], pool_config_key(sharding, ident, slot))
            for slot in slots
        )
        shards.append(Shard(name, pools, member.eventlog_schema))
        if ident == sharding.default:
            jobs = next((p for p in pools if p.slot == kebab_spelling(JOBS_CONFIG)), None)
            fallback = jobs is None
            jobs = jobs or pools[0]
    assert jobs is not None  # the settings guarantee that the default shard exists
    return Target(source, settings, tuple(shards), jobs, fallback)
