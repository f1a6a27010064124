"""Walking a segment (spec §2, TV5): blank records, zeros, and a scan that agrees with
decoding record after record."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from tests.rmqstore.formats.test_commitlog import _records, tv4_record


def test_segment_with_records_then_blank_then_junk():
    r = tv4_record()
    rec0 = cl.encode(r)
    r.physical_offset += len(rec0)
    rec1 = cl.encode(r)
    size = 1024
    seg = bytearray(size)
    seg[: len(rec0)] = rec0
    seg[len(rec0) : 2 * len(rec0)] = rec1
    left = size - 2 * len(rec0)
    seg[2 * len(rec0) : 2 * len(rec0) + 8] = cl.blank(left)
    seg[-5:] = b"\xff" * 5
    got = list(commitlog_segment.iter_segment(bytes(seg)))
    assert [pos for pos, _ in got] == [0, 205]
    assert commitlog_segment.scan_end(bytes(seg)) == (410, commitlog_segment.Blank(410, left), None)


def _reference_scan_end(buf):
    """scan_end spelled with the record decoder, one record at a time."""
    pos = 0
    try:
        for at, rec in commitlog_segment.iter_segment(buf, 0, None, True, 0, cl.decode_meta):
            pos = at + rec.total_size
    except CorruptRecordError as e:
        return pos, None, e.offset
    if pos + 8 <= len(buf) and cl.BLANK.unpack_from(buf, pos)[1] == cl.BLANK_MAGIC:
        return pos, commitlog_segment.Blank(pos, cl.BLANK.unpack_from(buf, pos)[0]), None
    return pos, None, None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_records.filter(lambda r: len(r.topic.encode()) <= 127), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    st.sampled_from(["zeros", "blank", "cut"]),
)
def test_the_segment_scan_agrees_with_the_record_decoder(records, flips, ending):
    buf = bytearray(b"".join(cl.encode(r) for r in records))
    if ending == "blank":
        buf += cl.blank(64) + bytes(56)
    elif ending == "zeros":
        buf += bytes(40)
    else:
        del buf[-3:]
    for at, value in flips:
        buf[at % len(buf)] = value
    tally = commitlog_segment.QueueTally(count_from=len(cl.encode(records[0])))
    end, blank, err = commitlog_segment.scan_end(bytes(buf), tally=tally)
    assert (end, blank, err.offset if err else None) == _reference_scan_end(bytes(buf))
    decoded = commitlog_segment.iter_segment(bytes(buf[:end]), 0, None, True, 0, cl.decode_meta)
    counted = [(at, m) for at, m in decoded if at >= tally.count_from]  # not the first record
    assert (tally.next_offsets, tally.last_position) == _reference_tally(counted)


def _reference_tally(records) -> tuple[dict, int | None]:
    """The tally's rule, record by record: (next queue offset per queue, last position)."""
    next_offsets: dict = {}
    for _, m in records:
        if not m.sys_flag & cl.NO_QUEUE_OFFSET_BIT:
            key = (m.topic, m.queue_id)
            if next_offsets.get(key, 0) <= m.queue_offset:
                next_offsets[key] = m.queue_offset + 1
    return next_offsets, records[-1][0] if records else None


def test_a_tally_counts_queue_offsets_but_not_those_of_prepared_records():
    buf = b""
    for topic, qid, qo, flag in [("A", 1, 3, 0), ("A", 1, 2, 0),  # an older one does not lower
                                 ("B", 0, 0, cl.TRANSACTION_PREPARED_TYPE),
                                 ("B", 1, 5, cl.TRANSACTION_ROLLBACK_TYPE)]:
        r = tv4_record()
        r.topic, r.queue_id, r.queue_offset, r.sys_flag = topic, qid, qo, flag
        r.physical_offset = len(buf)
        buf += cl.encode(r)
    tally = commitlog_segment.QueueTally()
    commitlog_segment.scan_end(buf + bytes(8), tally=tally)
    assert tally.next_offsets == {("A", 1): 4}
    assert tally.last_position == len(buf) - len(cl.encode(r))


def _two_records(base: int) -> tuple[bytearray, int]:
    """A 1 KiB segment starting at commitlog offset ``base``: two records, then zeros."""
    r = tv4_record()
    r.physical_offset = base
    rec0 = cl.encode(r)
    r.physical_offset = base + len(rec0)
    seg = bytearray(1024)
    seg[: len(rec0)] = rec0
    seg[len(rec0) : 2 * len(rec0)] = cl.encode(r)
    return seg, len(rec0)


def test_find_record_finds_the_first_record_at_or_after_a_position():
    seg, second = _two_records(4096)
    find = commitlog_segment.find_record
    assert find(bytes(seg), 0, len(seg), 4096) == 0
    assert find(bytes(seg), 1, len(seg), 4096) == second
    assert find(bytes(seg), second, len(seg), 4096) == second
    assert find(bytes(seg), 1, second, 4096) is None  # the window ends before it
    assert find(bytes(seg), 1, second + 1, 4096) == second
    assert find(bytes(seg), second + 1, len(seg), 4096) is None  # zeros after it
    assert find(bytes(seg), 0, len(seg), 0) is None  # no record names these positions


def test_find_record_passes_over_bytes_that_only_look_like_a_header():
    seg, second = _two_records(0)
    fake = 150  # inside the first record's body: a magic, and offsets that do not match
    seg[fake : fake + 8] = cl.BLANK.pack(40, cl.MAGIC_V1)
    seg[fake + cl.PHYSICAL_OFFSET_AT : fake + cl.PHYSICAL_OFFSET_AT + 8] = (7).to_bytes(8, "big")
    assert commitlog_segment.find_record(bytes(seg), 1, len(seg), 0) == second
    # a header naming its own position is taken: only a walk from the start tells them apart
    seg[fake + cl.PHYSICAL_OFFSET_AT : fake + cl.PHYSICAL_OFFSET_AT + 8] = fake.to_bytes(8, "big")
    assert commitlog_segment.find_record(bytes(seg), 1, len(seg), 0) == fake
    seg[fake : fake + 4] = (2000).to_bytes(4, "big")  # a size running past the segment
    assert commitlog_segment.find_record(bytes(seg), 1, len(seg), 0) == second
    seg[len(seg) - 20 : len(seg) - 12] = cl.BLANK.pack(8, cl.MAGIC_V1)  # no room for offsets
    assert commitlog_segment.find_record(bytes(seg), second + 1, len(seg), 0) is None
