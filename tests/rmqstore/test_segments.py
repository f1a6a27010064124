"""Segment naming (spec §3.1, TV8)."""

import pytest

from rmqstore.segments import parse_segment_name, roll_next, segment_name, segment_start


@pytest.mark.parametrize(
    ("offset", "name"),
    [
        (0, "00000000000000000000"),
        (1073741824, "00000000001073741824"),
        (3 * 2**30, "00000000003221225472"),
        (6_000_000, "00000000000006000000"),  # second consume-queue file
    ],
)
def test_tv8_names(offset, name):
    assert segment_name(offset) == name
    assert parse_segment_name(name) == offset


@pytest.mark.parametrize("bad", ["0", "abc", "0000000000000000000a", "000000000000000000000", ""])
def test_non_segment_names(bad):
    assert parse_segment_name(bad) is None


def test_roll_next_and_start():
    size = 1024
    assert roll_next(0, size) == 1024 and roll_next(1000, size) == 1024
    assert roll_next(1024, size) == 2048
    assert segment_start(1124, size) == 1024 and segment_start(100, size) == 0
