"""Index file (spec §6, TV9, TV10, TV11, §12 IndexFileTest) over an in-memory buffer."""

import random
import struct

import numpy as np
import pytest

from rmqstore.formats import index_file as ix
from rmqstore.formats.javahash import index_hash

SLOTS, ENTRIES = 100, 400


def new_file(header: ix.IndexHeader | None = None) -> ix.IndexFile:
    buf = bytearray(ix.file_size(SLOTS, ENTRIES))
    if header is not None:
        ix.HEADER.pack_into(buf, 0, *header)
    return ix.IndexFile(buf, SLOTS, ENTRIES)


def put(f: ix.IndexFile, key: str, phy: int, ts: int) -> bool:
    return f.put(index_hash(key), phy, ts)


def test_tv9_sizes():
    assert ix.file_size() == 420_000_040
    assert ix.file_size(SLOTS, ENTRIES) == 8440
    assert ix.HEADER_SIZE + ix.SLOT_SIZE * ix.DEFAULT_SLOTS + ix.ENTRY_SIZE * 1 == 20_000_060


def test_tv10_walkthrough():
    assert index_hash("T#Aa") == index_hash("T#BB") == 2538191 == 0x0026BACF
    assert index_hash("T#Aa") % SLOTS == 91
    f = new_file()
    assert put(f, "T#Aa", 0, 1700000000000)
    assert put(f, "T#BB", 205, 1700000001500)
    assert put(f, "T#Aa", 410, 1700000003999)
    assert put(f, "T#x", 615, 1699999990000)
    buf = bytes(f.buf)
    assert buf[:40].hex().upper() == (
        "0000018BCFE56800" "0000018BCFE540F0" "0000000000000000" "0000000000000267"
        "00000002" "00000005"
    )
    assert f.read_header() == ix.IndexHeader(1700000000000, 1699999990000, 0, 615, 2, 5)
    assert f.slot(91) == 3
    assert index_hash("T#x") % SLOTS == 29 and f.slot(29) == 4
    base = 40 + 4 * SLOTS

    def entry_hex(n):
        return buf[base + 20 * n : base + 20 * (n + 1)].hex().upper()

    assert entry_hex(0) == "00" * 20
    assert entry_hex(1) == "0026BACF" "0000000000000000" "00000000" "00000000"
    assert entry_hex(2) == "0026BACF" "00000000000000CD" "00000001" "00000001"
    assert entry_hex(3) == "0026BACF" "000000000000019A" "00000003" "00000002"
    assert entry_hex(4) == "00014009" "0000000000000267" "00000000" "00000000"  # clamped diff
    long_max = 2**63 - 1
    assert f.select_phy_offsets("T#Aa", 64, 0, long_max) == [410, 205, 0]  # T#BB shares hash
    assert f.select_phy_offsets("T#Aa", 64, 1700000003000, long_max) == [410]
    assert f.select_phy_offsets("T#Aa", 64, 1700000003999, long_max) == []  # Q1: truncated
    assert f.select_phy_offsets("T#Aa", 1, 0, long_max) == [410]
    assert not f.is_time_matched(1700000001000, 1700000002000)  # Q3: end < begin in header


def test_tv11_first_entry_of_a_rolled_file():
    """A file that follows a full one.

    RocketMQ creates it with begin = end = the previous file's end (1699999990000, phy 615) and
    measures the first entry against that inherited begin: entry 1 gets diff 15 and reads back
    as …020000, so the query [..5000, ..5999] finds nothing. Our IndexFile deliberately starts
    the file at the first entry's own time instead: diff 0, and the entry is found. The header
    bytes after the put are the same in both.
    """
    f = new_file(ix.IndexHeader(1699999990000, 1699999990000, 615, 615, 0, 0))
    assert bytes(f.buf[:40]).hex().upper() == (
        "0000018BCFE540F0" "0000018BCFE540F0" "0000000000000267" "0000000000000267"
        "00000000" "00000000"
    )
    assert put(f, "T#Aa", 820, 1700000005000)
    assert bytes(f.buf[:40]).hex().upper() == (
        "0000018BCFE57B88" "0000018BCFE57B88" "0000000000000334" "0000000000000334"
        "00000001" "00000002"
    )
    base = 40 + 4 * SLOTS
    assert bytes(f.buf[base + 20 : base + 40]).hex().upper() == (
        "0026BACF" "0000000000000334" "00000000" "00000000"  # RocketMQ: diff 0000000F
    )
    assert f.select_phy_offsets("T#Aa", 64, 1700000005000, 1700000005999) == [820]
    assert put(f, "T#Aa", 1025, 1700000006000)
    assert f.select_phy_offsets("T#Aa", 64, 1700000006000, 1700000019000) == [1025]


def test_tv17_time_diff_truncates_toward_zero():
    f = new_file()
    assert put(f, "T#a", 0, 1700000000999)
    assert put(f, "T#b", 1, 1700000000998)  # -1 ms: Java -1/1000 == 0 (Python // gives -1)
    assert put(f, "T#c", 2, 1700000002998)  # 1999 ms: 1, not rounded up
    assert put(f, "T#d", 3, 1699999990000)  # -10999 ms: -10 in Java, clamped to 0
    assert [f.entry(n)[2] for n in (1, 2, 3, 4)] == [0, 0, 1, 0]


def test_index_file_test_capacity_399_then_full():
    f = new_file()
    for i in range(399):
        assert put(f, str(i), i, 1700000000000 + i)
    assert f.is_full and f.read_header().index_count == 400 and f.header.entries == 399
    assert not put(f, "400", 400, 1700000000400)
    assert f.read_header().index_count == 400
    assert f.select_phy_offsets("60", 64, 0, 2**63 - 1) == [60]


def _reference_put(buf: bytearray, key_hash: int, phy: int, ts: int) -> bool:
    """putKey from spec §6.3 entry by entry, with our first-entry rule (begin = own time)."""
    begin, end, bphy, ephy, slot_count, count = ix.HEADER.unpack_from(buf, 0)
    if count >= ENTRIES:
        return False
    if count <= 1:
        count, begin, bphy = 1, ts, phy
    slot_pos = 40 + 4 * (key_hash % SLOTS)
    (old,) = struct.unpack_from(">i", buf, slot_pos)
    if old <= 0 or old > count:
        old = 0
    diff = int((ts - begin) / 1000) if begin > 0 else 0  # Java truncating division
    diff = min(max(diff, 0), 2**31 - 1)
    struct.pack_into(">iqii", buf, 40 + 4 * SLOTS + 20 * count, key_hash, phy, diff, old)
    struct.pack_into(">i", buf, slot_pos, count)
    ix.HEADER.pack_into(buf, 0, begin, ts, bphy, phy, slot_count + (old == 0), count + 1)
    return True


@pytest.mark.parametrize("with_chains", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_put_many_equals_repeated_put_key(seed, with_chains):
    rng = random.Random(seed)
    n = rng.randrange(1, 450)
    keys = [f"T#{rng.randrange(60)}" for _ in range(n)]
    hashes = np.array([index_hash(k) for k in keys], dtype=np.int64)
    phys = np.arange(n, dtype=np.int64) * 200
    times = 1700000000000 + np.cumsum([rng.randrange(-3000, 3000) for _ in range(n)])
    expected = bytearray(ix.file_size(SLOTS, ENTRIES))
    fitted = sum(_reference_put(expected, int(h), int(p), int(t))
                 for h, p, t in zip(hashes, phys, times, strict=True))
    f = new_file()
    done = 0
    while done < n:  # feed in uneven batches
        k = rng.randrange(1, 40)
        batch = hashes[done : done + k]
        chains = ix.batch_chains(batch % SLOTS) if with_chains else None  # as a rebuild does
        got = f.put_many(batch, phys[done : done + k], times[done : done + k], chains)
        if got == 0:
            break
        done += got
    assert done == fitted == min(n, ENTRIES - 1)
    assert bytes(f.buf) == bytes(expected)


def test_corrupt_slot_pointing_past_count_counts_as_empty():
    f = new_file()
    assert put(f, "T#a", 1, 1700000000000)
    s = index_hash("T#b") % SLOTS
    struct.pack_into(">i", f.buf, 40 + 4 * s, 999)  # garbage beyond index_count
    assert put(f, "T#b", 2, 1700000000000)
    assert f.entry(2)[3] == 0 and f.read_header().hash_slot_count == 2


def test_too_small_buffer_is_refused():
    with pytest.raises(ValueError, match="8440"):
        ix.IndexFile(bytearray(100), SLOTS, ENTRIES)
