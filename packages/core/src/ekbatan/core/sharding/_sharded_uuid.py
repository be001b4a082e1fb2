"""``ShardedUUID``: UUID v7 ids that carry the shard they belong to.

Layout (RFC 9562 v7, the shard in the first 14 bits of ``rand_b``)::

    most significant 64:  [48-bit unix ms][4-bit version 0111][12-bit random]
    least significant 64: [2-bit variant 10][8-bit group][6-bit member][48-bit random]

Ids still sort by creation time, and any service can route a row to its shard from its id.
"""

from __future__ import annotations

import secrets
import time
import uuid
from datetime import UTC, datetime

from ekbatan.core.sharding._shard_identifier import MEMBER_BITS, ShardIdentifier

_VERSION_7 = 0x7
_VARIANT_RFC = 0b10


class ShardedUUID:
    """Generation and decoding of shard-carrying UUID v7 values (plain :class:`uuid.UUID` objects)."""

    @staticmethod
    def generate(
        shard: ShardIdentifier = ShardIdentifier.DEFAULT, *, unix_ms: int | None = None
    ) -> uuid.UUID:
        millis = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
        if not 0 <= millis < 1 << 48:
            raise ValueError(f"timestamp {millis} ms does not fit the 48 bits of a UUID v7")
        msb = (millis << 16) | (_VERSION_7 << 12) | secrets.randbits(12)
        shard_bits = (shard.group << MEMBER_BITS) | shard.member
        lsb = (_VARIANT_RFC << 62) | (shard_bits << 48) | secrets.randbits(48)
        return uuid.UUID(int=(msb << 64) | lsb)

    @staticmethod
    def is_sharded(value: uuid.UUID) -> bool:
        """True for UUID v7 (the only version whose ``rand_b`` carries shard bits)."""
        return value.version == _VERSION_7 and value.variant == uuid.RFC_4122

    @staticmethod
    def shard_of(value: uuid.UUID) -> ShardIdentifier | None:
        """The shard encoded in a v7 id; ``None`` for any other version (route it to the default)."""
        if not ShardedUUID.is_sharded(value):
            return None
        lsb = value.int & ((1 << 64) - 1)
        shard_bits = (lsb >> 48) & 0x3FFF
        return ShardIdentifier(shard_bits >> MEMBER_BITS, shard_bits & ((1 << MEMBER_BITS) - 1))

    @staticmethod
    def unix_ms(value: uuid.UUID) -> int:
        return value.int >> 80

    @staticmethod
    def created_at(value: uuid.UUID) -> datetime:
        return datetime.fromtimestamp(ShardedUUID.unix_ms(value) / 1000, tz=UTC)
