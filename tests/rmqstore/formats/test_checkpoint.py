"""Checkpoint file (spec §7.1, TV14)."""

from rmqstore.formats import checkpoint as ck


def test_tv14_bytes_and_min_timestamp():
    cp = ck.Checkpoint(0xAABB, 0xCCDD, 0)
    data = ck.encode(cp)
    assert len(data) == ck.FILE_SIZE == 4096
    assert data[:24].hex().upper() == "000000000000AABB" "000000000000CCDD" "0000000000000000"
    assert data[24:] == bytes(4096 - 24)
    assert cp.min_timestamp == 40707
    assert cp.min_timestamp_index == 0
    assert ck.decode(data) == cp


def test_min_timestamp_floors_at_zero():
    assert ck.Checkpoint(1000, 5000, 7).min_timestamp == 0
    assert ck.Checkpoint(10_000, 20_000, 5_000).min_timestamp_index == 5_000


def test_short_buffer_decodes_to_zeros():
    assert ck.decode(b"\x01" * 10) == ck.Checkpoint()
