"""``DatabaseRegistry``: every shard's transaction manager, the default shard, and named pools."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from ekbatan.core.config._key_folding import fold_key
from ekbatan.core.persistence._connection_provider import ConnectionProvider
from ekbatan.core.persistence._transaction_manager import TransactionManager
from ekbatan.core.sharding._config import (
    JOBS_CONFIG,
    PRIMARY_CONFIG,
    SECONDARY_CONFIG,
    ShardingConfig,
    check_default_shard,
    pool_config_key,
    target_name,
)
from ekbatan.core.sharding._jobs_pool import (
    JobsPoolNotConfiguredError,
    jobs_config_path,
    jobs_pool_missing_message,
    misspelled_jobs_config_hint,
)
from ekbatan.core.sharding._shard_identifier import ShardIdentifier

log = logging.getLogger("ekbatan.core.sharding.registry")


class DatabaseRegistry:
    """Shards in registration order, one :class:`TransactionManager` each, and a default shard.

    The default is explicit, or implied when exactly one shard is registered. Everything the
    registry holds is closed by :meth:`close`.
    """

    def __init__(
        self, managers: Iterable[TransactionManager], *, default_shard: ShardIdentifier | None = None
    ) -> None:
        self._managers: dict[ShardIdentifier, TransactionManager] = {}
        for manager in managers:
            if manager.shard is None:
                raise ValueError(f"{manager!r} has no shard; create it with shard=ShardIdentifier(g, m)")
            if manager.shard in self._managers:
                raise ValueError(f"shard {manager.shard} is registered twice")
            self._managers[manager.shard] = manager
        if not self._managers:
            raise ValueError("a DatabaseRegistry needs at least one database")
        if default_shard is None:
            if len(self._managers) > 1:
                raise ValueError(
                    f"{len(self._managers)} databases registered but no default_shard given; "
                    f"pass default_shard=ShardIdentifier(group, member)"
                )
            default_shard = next(iter(self._managers))
        if default_shard not in self._managers:
            raise ValueError(f"default_shard {default_shard} must reference a registered database")
        self._default = default_shard
        self._sharding: ShardingConfig | None = None
        self._names: dict[ShardIdentifier, str] = {}
        self._named: dict[tuple[ShardIdentifier, str], ConnectionProvider] = {}
        self._closed = False

    @classmethod
    def from_config(cls, settings: ShardingConfig | Any) -> DatabaseRegistry:
        """Build from ``ekbatan.sharding`` (or the whole ``ekbatan`` settings).

        The default shard is checked before any pool is created. Each member gets its own
        primary provider, and a secondary one only when ``secondary-config`` is present (the
        primary provider object otherwise). Other named pools are created on first request.
        """
        sharding = settings if isinstance(settings, ShardingConfig) else settings.sharding
        check_default_shard(sharding)
        managers: list[TransactionManager] = []
        try:
            for group, member in sharding.members():
                shard = ShardIdentifier(group.group, member.member)
                name = target_name(group, member)
                primary = ConnectionProvider(
                    member.primary_config,
                    name=f"{name} primary",
                    config_path=pool_config_key(sharding, shard, PRIMARY_CONFIG),
                )
                secondary = None
                if member.secondary_config is not None:
                    try:
                        secondary = ConnectionProvider(
                            member.secondary_config,
                            name=f"{name} secondary",
                            config_path=pool_config_key(sharding, shard, SECONDARY_CONFIG),
                        )
                    except BaseException:
                        primary.close()
                        raise
                managers.append(
                    TransactionManager(
                        primary, secondary, shard=shard, eventlog_schema=member.eventlog_schema
                    )
                )
        except BaseException:
            for manager in managers:
                manager.close()
            raise
        registry = cls(managers, default_shard=sharding.default)
        registry._sharding = sharding
        registry._names = sharding.shard_names()
        return registry

    # --- shards -------------------------------------------------------------------------------

    @property
    def default_shard(self) -> ShardIdentifier:
        return self._default

    @property
    def shards(self) -> tuple[ShardIdentifier, ...]:
        return tuple(self._managers)

    def __iter__(self) -> Iterator[ShardIdentifier]:
        return iter(self._managers)

    def __len__(self) -> int:
        return len(self._managers)

    def __contains__(self, shard: object) -> bool:
        return shard in self._managers

    def transaction_managers(self) -> list[TransactionManager]:
        """All shards' managers in registration (configuration) order."""
        return list(self._managers.values())

    def transaction_manager(self, shard: ShardIdentifier | None = None) -> TransactionManager:
        shard = self._default if shard is None else shard
        try:
            return self._managers[shard]
        except KeyError:
            raise LookupError(
                f"No database registered for shard {shard}; registered: {', '.join(map(str, self._managers))}"
            ) from None

    def effective_shard(self, shard: ShardIdentifier | None) -> ShardIdentifier:
        """``shard`` when registered, else the default shard (for shards not deployed yet)."""
        return shard if shard is not None and shard in self._managers else self._default

    def shard_name(self, shard: ShardIdentifier) -> str:
        """``"<group name>/<member name or member-N>"`` when built from config, else ``"(g,m)"``."""
        return self._names.get(shard, str(shard))

    # --- connections --------------------------------------------------------------------------

    def primary(self, shard: ShardIdentifier | None = None) -> ConnectionProvider:
        return self.transaction_manager(shard).primary

    def secondary(self, shard: ShardIdentifier | None = None) -> ConnectionProvider:
        return self.transaction_manager(shard).secondary

    @contextmanager
    def transaction(self, shard: ShardIdentifier | None = None) -> Iterator[sa.Connection]:
        """A transaction on the shard's primary (the default shard when ``shard`` is None)."""
        with self.transaction_manager(shard).transaction() as connection:
            yield connection

    @contextmanager
    def read_only(self, shard: ShardIdentifier | None = None) -> Iterator[sa.Connection]:
        """A connection on the shard's replica, or its primary when it has none."""
        with self.transaction_manager(shard).read_only() as connection:
            yield connection

    def provider(self, name: str, shard: ShardIdentifier | None = None) -> ConnectionProvider:
        """The pool named ``name`` on ``shard``: ``primary_config``, ``secondary_config`` or any slot.

        Slots other than primary/secondary are built on first request and then reused.
        """
        shard = self._default if shard is None else shard
        slot = fold_key(name)
        manager = self.transaction_manager(shard)
        if slot == PRIMARY_CONFIG:
            return manager.primary
        if slot == SECONDARY_CONFIG:
            return manager.secondary
        if (shard, slot) in self._named:
            return self._named[(shard, slot)]
        member = self._sharding.member_for(shard) if self._sharding is not None else None
        config = member.config_for(slot) if member is not None else None
        if config is None:
            known = sorted({PRIMARY_CONFIG, SECONDARY_CONFIG} | (set(member.configs) if member else set()))
            raise LookupError(f"shard {self.shard_name(shard)} has no pool named {slot!r}; known: {known}")
        assert self._sharding is not None  # a configured slot comes from the settings
        provider = ConnectionProvider(
            config,
            name=f"{self.shard_name(shard)} {slot}",
            config_path=pool_config_key(self._sharding, shard, slot),
        )
        self._named[(shard, slot)] = provider
        return provider

    def register_provider(
        self, name: str, provider: ConnectionProvider, shard: ShardIdentifier | None = None
    ) -> None:
        """Add a named pool by hand (closed with the registry)."""
        shard = self._default if shard is None else shard
        self.transaction_manager(shard)
        self._named[(shard, fold_key(name))] = provider

    def jobs_provider(self, *, strict: bool = False) -> ConnectionProvider:
        """The scheduler's pool: the default shard's ``jobs_config``.

        Without one, the default shard's primary provider is returned (the same object, no new
        pool) and a WARNING names the key to add; with ``strict=True`` that is an error instead.
        """
        if (self._default, JOBS_CONFIG) in self._named:
            return self._named[(self._default, JOBS_CONFIG)]
        member = self._sharding.member_for(self._default) if self._sharding is not None else None
        if member is not None and member.config_for(JOBS_CONFIG) is not None:
            return self.provider(JOBS_CONFIG)
        if strict:
            if self._sharding is not None:
                raise JobsPoolNotConfiguredError(jobs_pool_missing_message(self._sharding))
            raise JobsPoolNotConfiguredError(
                "no jobs pool: register one with registry.register_provider('jobs_config', provider)"
            )
        where = jobs_config_path(self._sharding) if self._sharding is not None else "a 'jobs_config' provider"
        log.warning(
            "%s is not set%s; the scheduler shares the primary pool of shard %s. "
            "Add a jobs-config with a small maximum-pool-size so polling never competes with application queries",
            where,
            misspelled_jobs_config_hint(member) if member is not None else "",
            self.shard_name(self._default),
        )
        return self.primary()

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every pool once; the first failure is raised after all were attempted."""
        if self._closed:
            return
        self._closed = True
        failures: list[BaseException] = []
        closables: list[ConnectionProvider | TransactionManager] = [
            *self._named.values(),
            *self._managers.values(),
        ]
        for closable in closables:
            try:
                closable.close()
            except Exception as error:  # keep closing the rest
                failures.append(error)
        if failures:
            first = failures[0]
            for other in failures[1:]:
                first.add_note(f"also failed while closing: {type(other).__name__}: {other}")
            raise first

    def __enter__(self) -> DatabaseRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shards = ", ".join(f"{s}={self.shard_name(s)}" for s in self._managers)
        return f"<DatabaseRegistry default={self._default} shards=[{shards}]>"
