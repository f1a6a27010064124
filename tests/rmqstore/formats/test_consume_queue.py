"""Consume-queue unit (spec §5.1, TV4 CQ entry, TV9 size)."""

import numpy as np

from rmqstore.formats import consume_queue as cq


def test_tv4_unit_bytes():
    unit = cq.CqUnit(1073741824, 205, 2598919)
    data = cq.encode(unit)
    assert data.hex().upper() == "0000000040000000" "000000CD" "000000000027A807"
    assert cq.decode(data) == unit


def test_tv9_file_size():
    assert cq.file_size(cq.DEFAULT_ENTRIES_PER_FILE) == 6_000_000


def test_encode_many_matches_encode_and_sign_extension():
    offs = np.array([0, 205, 2**40], dtype=np.int64)
    sizes = np.array([205, 300, 1], dtype=np.int32)
    tags = np.array([0, -935240381, 1700000010123], dtype=np.int64)
    data = cq.encode_many(offs, sizes, tags)
    assert data == b"".join(cq.encode(cq.CqUnit(int(o), int(s), int(t)))
                            for o, s, t in zip(offs, sizes, tags, strict=True))
    assert data[32:40].hex().upper() == "FFFFFFFFC8415D43"
    assert cq.units(data)["size"].tolist() == [205, 300, 1]


def test_valid_count_stops_at_first_invalid_unit():
    pre_blank = cq.encode(cq.CqUnit(0, 0x7FFFFFFF, 0))  # fillPreBlank units count as valid
    good = cq.encode(cq.CqUnit(100, 20, 5))
    assert cq.valid_count(pre_blank + good + bytes(40)) == 2
    assert cq.valid_count(good + cq.encode(cq.CqUnit(-1, 20, 0)) + good) == 1
    assert cq.valid_count(b"") == 0
    assert cq.is_valid(cq.decode(pre_blank)) and not cq.is_valid(cq.CqUnit(5, 0, 0))


def test_units_read_one_at_a_time_and_as_columns():
    units = [cq.CqUnit(0, 120, 7), cq.CqUnit(120, 99, -1), cq.CqUnit(219, 0x7FFFFFFF, 0)]
    buf = b"".join(map(cq.encode, units)) + bytes(cq.UNIT_SIZE)  # then a unit not written
    assert [cq.written_at(buf, i) for i in range(5)] == [True, True, True, False, False]
    offsets, sizes = cq.column_reads(3)
    assert offsets.unpack_from(buf, 0) == (0, 120, 219)
    assert sizes.unpack_from(buf, 0) == (120, 99, 0x7FFFFFFF)
    assert cq.column_reads(3) == (offsets, sizes)  # made once for a count
