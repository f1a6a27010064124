"""Decoding many records at once agrees with decoding them one at a time (``decode_meta``
walked by ``iter_segment``): the same records, fields, end and error, however damaged."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import decode_columns, record_details
from rmqstore.formats.hosts import Host
from tests.rmqstore.formats.test_commitlog import _records, tv4_record


def _one_at_a_time(buf, start=0, limit=None, check_crc=True, base=0):
    """(metas, error offset) the way iter_segment reads them."""
    metas = []
    try:
        for _, m in commitlog_segment.iter_segment(buf, start, limit, check_crc, base,
                                                   cl.decode_meta):
            metas.append(m)
    except CorruptRecordError as e:
        return metas, str(e)
    return metas, None


def _assert_same(buf, start=0, limit=None, check_crc=True, base=0):
    cols, end, err = decode_columns(buf, start, limit, check_crc, base)
    metas, want_err = _one_at_a_time(buf, start, limit, check_crc, base)
    assert (str(err) if err else None) == want_err
    assert len(cols) == len(metas)
    got = [
        (int(cols.total_size[i]), int(cols.queue_id[i]), int(cols.queue_offset[i]),
         int(cols.physical_offset[i]), int(cols.sys_flag[i]), int(cols.store_timestamp[i]),
         int(cols.prepared_transaction_offset[i]), cols.topic_of(i), cols.properties_of(i))
        for i in range(len(cols))
    ]  # fmt: skip
    want = [
        (m.total_size, m.queue_id, m.queue_offset, m.physical_offset, m.sys_flag,
         m.store_timestamp, m.prepared_transaction_offset, m.topic, m.properties)
        for m in metas
    ]  # fmt: skip
    assert got == want
    assert end == (int(cols.position[-1] + cols.total_size[-1]) if len(cols) else start)
    return cols, err


def test_tv4_records_then_blank():
    rec = cl.encode(tv4_record())
    buf = rec * 3 + cl.blank(100) + bytes(92)
    cols, err = _assert_same(buf)
    assert err is None
    assert cols.position.tolist() == [0, 205, 410]
    assert cols.topics == ["TopicTest"]


def test_a_bad_crc_stops_at_that_record_unless_crcs_are_not_checked():
    rec = bytearray(cl.encode(tv4_record()))
    bad = bytearray(rec)
    bad[95] ^= 0xFF  # inside the body (bytes 88-101)
    buf = bytes(rec + bad + rec)
    cols, err = _assert_same(buf)
    assert len(cols) == 1 and "CRC" in str(err)
    cols, err = _assert_same(buf, check_crc=False)
    assert len(cols) == 3 and err is None


def test_many_topics_are_numbered_by_first_appearance():
    records = []
    for i, topic in enumerate(["b", "a", "b", "ab", "a\x00", "a", "中文"]):
        r = tv4_record()
        r.topic = topic
        r.queue_offset = i
        records.append(cl.encode(r))
    cols, _ = _assert_same(b"".join(records) + bytes(8))
    assert cols.topics == ["b", "a", "ab", "a\x00", "中文"]
    assert cols.topic_id.tolist() == [0, 1, 0, 2, 3, 1, 4]


def test_properties_alike_or_not_and_records_ending_the_buffer():
    """Properties of like lengths are read as rows of one matrix, a very long one among
    short ones record by record; both read the last record, which ends the buffer."""
    for long_value in ("y", "v" * 3000):
        records = []
        for i in range(6):
            r = tv4_record()
            r.properties = props_fmt.encode({"KEYS": f"k{i}", "X": long_value if i == 3 else "x"})
            r.topic = "T" * (1 + 40 * (i % 2 == 0))  # the last, short, read as wide as the rest
            records.append(cl.encode(r))
        buf = b"".join(records)
        cols, err = _assert_same(buf)
        assert err is None and len(cols) == 6
        assert cols.properties_of(5) == props_fmt.encode({"KEYS": "k5", "X": "x"})


def test_at_most_max_records():
    rec = cl.encode(tv4_record())
    buf = rec * 5 + bytes(8)
    for n in range(7):
        cols, end, err = decode_columns(buf, 205, max_records=n)
        assert (len(cols), end, err) == (min(n, 4), 205 + 205 * min(n, 4), None)


def test_an_empty_range_and_a_start_past_records():
    rec = cl.encode(tv4_record())
    assert len(decode_columns(b"")[0]) == 0
    cols, end, err = decode_columns(rec * 2 + bytes(16), start=205)
    assert (cols.position.tolist(), end, err) == ([205], 410, None)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_records, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    st.sampled_from(["zeros", "blank", "cut", "junk"]),
    st.booleans(),
    st.integers(0, 2),
)
def test_columns_agree_with_the_record_decoder(records, flips, ending, check_crc, start_at):
    encoded = [cl.encode(r) for r in records]
    buf = bytearray(b"".join(encoded))
    if ending == "blank":
        buf += cl.blank(64) + bytes(56)
    elif ending == "zeros":
        buf += bytes(40)
    elif ending == "junk":
        buf += bytes(range(256))
    else:
        del buf[-3:]
    for at, value in flips:
        buf[at % len(buf)] = value
    start = sum(len(e) for e in encoded[: min(start_at, len(encoded) - 1)])
    _assert_same(bytes(buf), start, None, check_crc, 1 << 30)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 64))
def test_random_bytes_give_the_decoders_answer(data, start):
    _assert_same(data, min(start, len(data)))


def test_columns_over_a_memory_map(tmp_path):
    import mmap

    rec = cl.encode(tv4_record())
    path = tmp_path / "seg"
    path.write_bytes(rec * 4 + bytes(1000))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        cols, end, err = decode_columns(m, limit=410)
        assert (len(cols), end, err) == (2, 410, None)
    assert np.array_equal(cols.queue_offset, [5, 5])


def _as_v2(record: bytes) -> bytes:
    """A v1 record rewritten as v2: the topic length takes two bytes."""
    m = cl.decode_meta(record)
    at = m.body_at + m.body_len  # the v1 topic length byte
    out = bytearray(record[:at]) + len(m.topic.encode()).to_bytes(2, "big") + record[at + 1 :]
    out[0:8] = cl.BLANK.pack(len(out), cl.MAGIC_V2)
    return bytes(out)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_records, st.booleans()), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2))
def test_v2_records_among_v1_records(records, flips):
    buf = bytearray(b"".join(_as_v2(cl.encode(r)) if v2 else cl.encode(r) for r, v2 in records))
    for at, value in flips:
        buf[at % len(buf)] = value
    _assert_same(bytes(buf + bytes(8)))


def test_a_long_v2_topic():
    r = tv4_record()
    r.topic = "T" * 300  # only v2 can hold it
    rec = _as_v2(cl.encode_parts(r.topic.encode()[:100], 0, b"", b"", 0, 0, 0, r.born_host,
                                 r.store_host))
    m = cl.decode_meta(rec)
    at = m.body_at + m.body_len
    long = bytearray(rec[:at]) + (300).to_bytes(2, "big") + b"T" * 300 + rec[at + 2 + 100 :]
    long[0:4] = len(long).to_bytes(4, "big")
    cols, err = _assert_same(bytes(long) * 2 + bytes(8))
    assert (len(cols), cols.topics, err) == (2, ["T" * 300], None)


def _host_of(row: np.void, v6: bool) -> Host:
    raw = bytes(row)
    ip_size = 16 if v6 else 4
    return Host(raw[:ip_size], int.from_bytes(raw[ip_size : ip_size + 4], "big", signed=True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records, min_size=1, max_size=6), st.integers(0, 6), st.integers(0, 6))
def test_details_and_rows_agree_with_the_record_decoder(records, start, stop):
    buf = b"".join(cl.encode(r) for r in records)
    cols, _, _ = decode_columns(buf)
    d = record_details(buf, cols)
    for i, pos in enumerate(cols.position.tolist()):
        rec = cl.decode(buf, pos)
        assert (int(d.flag[i]), int(d.born_timestamp[i]), int(d.body_crc[i]),
                int(d.reconsume_times[i])) == (rec.flag, rec.born_timestamp, rec.body_crc,
                                               rec.reconsume_times)  # fmt: skip
        at, size = int(d.body_at[i]), int(d.body_length[i])
        assert buf[at : at + size] == rec.body
        assert _host_of(d.born_host[i], bool(d.born_v6[i])) == rec.born_host
        assert _host_of(d.store_host[i], bool(d.store_v6[i])) == rec.store_host
    some = cols.rows(start, stop)
    kept = list(range(len(cols)))[start:stop]
    assert some.position.tolist() == cols.position[kept].tolist()
    assert some.topics == cols.topics
    assert [some.properties_of(i) for i in range(len(some))] == [
        cols.properties_of(i) for i in kept
    ]
