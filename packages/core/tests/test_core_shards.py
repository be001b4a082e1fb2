import uuid

import pytest

from ekbatan.core import ShardedUUID, ShardIdentifier


@pytest.mark.parametrize(("group", "member"), [(0, 0), (1, 0), (0, 63), (255, 0), (255, 63), (170, 21)])
def test_sharded_uuid_round_trips_the_shard(group, member):
    shard = ShardIdentifier(group, member)
    value = ShardedUUID.generate(shard, unix_ms=1_767_225_600_000)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert ShardedUUID.shard_of(value) == shard
    assert ShardedUUID.unix_ms(value) == 1_767_225_600_000
    assert ShardedUUID.created_at(value).isoformat() == "2026-01-01T00:00:00+00:00"


def test_bit_layout_is_exactly_as_specified():
    value = ShardedUUID.generate(ShardIdentifier(255, 63), unix_ms=0x0123456789AB)
    msb, lsb = value.int >> 64, value.int & ((1 << 64) - 1)
    assert msb >> 16 == 0x0123456789AB
    assert (msb >> 12) & 0xF == 0b0111
    assert lsb >> 62 == 0b10
    assert (lsb >> 54) & 0xFF == 255  # group
    assert (lsb >> 48) & 0x3F == 63  # member
    other = ShardedUUID.generate(ShardIdentifier(0, 0), unix_ms=0x0123456789AB)
    assert (other.int >> 48) & 0x3FFF == 0


def test_ids_sort_by_creation_time_and_are_unique():
    ids = [ShardedUUID.generate(ShardIdentifier(3, 4), unix_ms=1000 + i) for i in range(200)]
    assert sorted(ids, key=lambda u: u.bytes) == ids
    assert len({*ids}) == 200


def test_non_v7_ids_carry_no_shard():
    assert ShardedUUID.shard_of(uuid.uuid4()) is None
    assert not ShardedUUID.is_sharded(uuid.uuid4())


@pytest.mark.parametrize(
    ("group", "member", "fragment"),
    [
        (256, 0, "group must be an integer 0..255; got 256"),
        (-1, 0, "group"),
        (0, 64, "member must be an integer 0..63"),
        (0, -1, "member"),
        (True, 0, "group"),
        ("1", 0, "group"),
    ],
)
def test_shard_identifier_range_errors_name_the_field(group, member, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        ShardIdentifier(group, member)


def test_default_shard():
    assert ShardIdentifier.DEFAULT == ShardIdentifier(0, 0) == ShardIdentifier.of(0, 0)
    assert str(ShardIdentifier(2, 5)) == "(2,5)"
