"""``ekbatan.sharding``: shard groups, their members, and each member's named pools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Self

from pydantic import ConfigDict, Field, field_validator, model_validator

from ekbatan.core.config._key_folding import KeyFoldingModel, fold_key, kebab_spelling
from ekbatan.core.persistence._data_source import DataSourceConfig
from ekbatan.core.persistence._sql_identifiers import validate_sql_identifier
from ekbatan.core.sharding._shard_identifier import MAX_GROUP, MAX_MEMBER, ShardIdentifier

PRIMARY_CONFIG = "primary_config"
SECONDARY_CONFIG = "secondary_config"
JOBS_CONFIG = "jobs_config"

_STRICT = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class DefaultShardConfig(KeyFoldingModel):
    """``default-shard: {group: 0, member: 0}``."""

    model_config = _STRICT

    group: int = Field(ge=0, le=MAX_GROUP)
    member: int = Field(ge=0, le=MAX_MEMBER)

    @property
    def shard(self) -> ShardIdentifier:
        return ShardIdentifier(self.group, self.member)


class MemberConfig(KeyFoldingModel):
    """One database of a group: its pools under ``configs`` (``primary-config`` required)."""

    model_config = _STRICT

    member: int = Field(ge=0, le=MAX_MEMBER)
    name: str | None = None
    eventlog_schema: str = "eventlog"
    configs: dict[str, DataSourceConfig]

    @field_validator("configs", mode="before")
    @classmethod
    def _fold_slot_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {fold_key(str(k)): v for k, v in value.items()}
        return value

    @field_validator("configs")
    @classmethod
    def _primary_required(cls, value: dict[str, DataSourceConfig]) -> dict[str, DataSourceConfig]:
        if PRIMARY_CONFIG not in value:
            present = ", ".join(k.replace("_", "-") for k in value) or "none"
            raise ValueError(
                f"primary-config is required (the pool transactions run on); configured: {present}"
            )
        return value

    @field_validator("eventlog_schema")
    @classmethod
    def _plain_identifier(cls, value: str) -> str:
        return validate_sql_identifier(value, "eventlog-schema")

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("name is blank; remove it or give the member a name")
        return value

    @property
    def primary_config(self) -> DataSourceConfig:
        return self.configs[PRIMARY_CONFIG]

    @property
    def secondary_config(self) -> DataSourceConfig | None:
        return self.configs.get(SECONDARY_CONFIG)

    def config_for(self, name: str) -> DataSourceConfig | None:
        """A named pool's settings; ``"jobs_config"`` is canonical, other spellings fold to it."""
        return self.configs.get(fold_key(name))


class GroupConfig(KeyFoldingModel):
    model_config = _STRICT

    group: int = Field(ge=0, le=MAX_GROUP)
    name: str
    members: list[MemberConfig] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name is blank; give the group a name such as 'global'")
        return value

    @field_validator("members")
    @classmethod
    def _unique_members(cls, value: list[MemberConfig]) -> list[MemberConfig]:
        seen = [m.member for m in value]
        duplicates = sorted({n for n in seen if seen.count(n) > 1})
        if duplicates:
            raise ValueError(f"member numbers must be unique within a group; repeated: {duplicates}")
        return value

    def member_named(self, number: int) -> MemberConfig | None:
        return next((m for m in self.members if m.member == number), None)


class ShardingConfig(KeyFoldingModel):
    """``ekbatan.sharding``: the default shard and every group/member, in the order written."""

    model_config = _STRICT

    default_shard: DefaultShardConfig
    groups: list[GroupConfig] = Field(min_length=1)

    @field_validator("groups")
    @classmethod
    def _unique_groups(cls, value: list[GroupConfig]) -> list[GroupConfig]:
        seen = [g.group for g in value]
        duplicates = sorted({n for n in seen if seen.count(n) > 1})
        if duplicates:
            raise ValueError(f"group numbers must be unique; repeated: {duplicates}")
        return value

    @model_validator(mode="after")
    def _default_shard_exists(self) -> Self:
        check_default_shard(self)
        return self

    @property
    def default(self) -> ShardIdentifier:
        return self.default_shard.shard

    def group_for(self, number: int) -> GroupConfig | None:
        return next((g for g in self.groups if g.group == number), None)

    def member_for(self, shard: ShardIdentifier) -> MemberConfig | None:
        group = self.group_for(shard.group)
        return group.member_named(shard.member) if group is not None else None

    def members(self) -> Iterator[tuple[GroupConfig, MemberConfig]]:
        """Every (group, member) pair in configuration order: groups, then their members."""
        for group in self.groups:
            for member in group.members:
                yield group, member

    def shard_names(self) -> dict[ShardIdentifier, str]:
        return {ShardIdentifier(g.group, m.member): target_name(g, m) for g, m in self.members()}


def pool_config_key(sharding: ShardingConfig, shard: ShardIdentifier, slot: str) -> str:
    """``ekbatan.sharding.groups[<g>].members[<m>].configs.<slot>``: list positions, as a
    settings error names them, not group and member numbers."""
    g = next(i for i, group in enumerate(sharding.groups) if group.group == shard.group)
    m = next(i for i, member in enumerate(sharding.groups[g].members) if member.member == shard.member)
    return f"ekbatan.sharding.groups[{g}].members[{m}].configs.{kebab_spelling(fold_key(slot))}"


def target_name(group: GroupConfig, member: MemberConfig) -> str:
    """``"<group name>/<member name or member-N>"``: how a shard is named in logs and errors."""
    return f"{group.name}/{member.name or f'member-{member.member}'}"


def check_default_shard(config: ShardingConfig) -> None:
    """Raise unless ``default-shard`` names a configured group and member; the message names the missing group or member."""
    wanted = config.default_shard
    group = config.group_for(wanted.group)
    if group is None:
        configured = ", ".join(f"{g.group} ({g.name})" for g in config.groups)
        raise ValueError(
            f"default-shard must reference a configured database: no group matching "
            f"default-shard.group={wanted.group}; configured groups: {configured}"
        )
    if group.member_named(wanted.member) is None:
        configured = ", ".join(str(m.member) for m in group.members)
        raise ValueError(
            f"default-shard must reference a configured database: group {group.group} ({group.name}) has no "
            f"member matching default-shard.member={wanted.member}; its members: {configured}"
        )
