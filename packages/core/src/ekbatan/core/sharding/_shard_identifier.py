"""``ShardIdentifier``: which database a row lives in, as (group 0..255, member 0..63)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

GROUP_BITS = 8
MEMBER_BITS = 6
MAX_GROUP = (1 << GROUP_BITS) - 1
MAX_MEMBER = (1 << MEMBER_BITS) - 1


@dataclass(frozen=True, order=True)
class ShardIdentifier:
    """A shard: ``group`` (8 bits, e.g. a region) and ``member`` (6 bits, a database in it)."""

    group: int
    member: int

    DEFAULT: ClassVar[ShardIdentifier]

    def __post_init__(self) -> None:
        for field, value, top in (("group", self.group, MAX_GROUP), ("member", self.member, MAX_MEMBER)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError(f"shard {field} must be an integer 0..{top}; got {value!r}")

    @classmethod
    def of(cls, group: int, member: int) -> ShardIdentifier:
        return cls(group, member)

    def __str__(self) -> str:
        return f"({self.group},{self.member})"


ShardIdentifier.DEFAULT = ShardIdentifier(0, 0)
