"""The batch encoder (which ``commitlog.encode_parts`` uses too): TV4's bytes, batches that
decode back to their records, size checks."""

from itertools import accumulate

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats.commitlog_batch import (
    SYS_FLAG,
    TOTAL_SIZE,
    BatchEncoder,
    PlainFew,
    PlainRun,
)
from tests.rmqstore.formats.test_commitlog import TV4, _host, _records, tv4_record


def _prepare(enc: BatchEncoder, r: cl.Record):
    return enc.prepare(
        r.topic.encode(), r.queue_id, r.body, r.properties.encode(), r.flag, r.sys_flag,
        r.born_timestamp, r.born_host, r.reconsume_times, r.prepared_transaction_offset,
    )  # fmt: skip


def test_tv4():
    r = tv4_record()
    enc = BatchEncoder(r.store_host)
    prepared = _prepare(enc, r)
    assert prepared[TOTAL_SIZE] == len(TV4) and prepared[SYS_FLAG] == 0
    assert enc.encode([prepared], [r.queue_offset], [r.physical_offset], r.store_timestamp) == TV4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records.filter(lambda r: len(r.topic.encode()) <= 127), min_size=1, max_size=6),
       st.integers(0, 1 << 40))  # fmt: skip
def test_a_batch_decodes_to_its_records(records, store_ts):
    store_host = records[0].store_host
    enc = BatchEncoder(store_host)
    prepared = [_prepare(enc, r) for r in records]
    qos = [r.queue_offset for r in records]
    phys = [r.physical_offset for r in records]
    data = enc.encode(prepared, qos, phys, store_ts)
    assert len(data) == sum(p[TOTAL_SIZE] for p in prepared)
    pos = 0
    for r, p in zip(records, prepared, strict=True):
        back = cl.decode(data, pos)  # CRC and every size check
        assert back.total_size == p[TOTAL_SIZE] and back.sys_flag == p[SYS_FLAG]
        assert (back.topic, back.queue_id, back.body, back.properties) == (
            r.topic, r.queue_id, r.body, r.properties
        )
        assert (back.queue_offset, back.physical_offset, back.store_timestamp) == (
            r.queue_offset, r.physical_offset, store_ts
        )
        assert (back.flag, back.born_timestamp, back.born_host, back.store_host) == (
            r.flag, r.born_timestamp, r.born_host, store_host
        )
        assert (back.reconsume_times, back.prepared_transaction_offset) == (
            r.reconsume_times, r.prepared_transaction_offset
        )
        v6 = cl.BORNHOST_V6_FLAG | cl.STOREHOST_V6_FLAG
        assert back.sys_flag & ~v6 == r.sys_flag & ~v6
        pos += back.total_size


def test_sizes_are_checked():
    r = tv4_record()
    enc = BatchEncoder(r.store_host)
    r.topic = "t" * 128
    with pytest.raises(CorruptRecordError, match="128 bytes"):
        _prepare(enc, r)
    r.topic, r.properties = "T", "a\x01" + "b" * 32766
    with pytest.raises(CorruptRecordError, match="properties"):
        _prepare(enc, r)



@settings(max_examples=150, deadline=None)
@given(
    store=_host, born=_host, topic=st.binary(min_size=1, max_size=127),
    bodies=st.lists(st.binary(max_size=40), min_size=1, max_size=8),
    shape=st.lists(st.booleans(), max_size=5), data=st.data(),
)  # fmt: skip
def test_a_plain_run_is_its_records_prepared_one_by_one(store, born, topic, bodies, shape, data):
    """prepare_plain + encode (whole and sliced) give prepare + encode's bytes, as a PlainRun
    (numpy) and as a PlainFew (one by one)."""
    n = len(bodies)
    # each properties part: one bytes for all (False) or one per message (True)
    parts = [
        data.draw(st.lists(st.binary(max_size=5), min_size=n, max_size=n)) if each
        else data.draw(st.binary(max_size=5))
        for each in shape
    ]  # fmt: skip
    props = [b"".join(p[i] if isinstance(p, list) else p for p in parts) for i in range(n)]
    queue_ids = data.draw(st.lists(st.integers(0, 1 << 20), min_size=n, max_size=n))
    enc = BatchEncoder(store)
    few = data.draw(st.sampled_from([1, 100]))  # always numpy, never numpy
    run = enc.prepare_plain(
        topic, queue_ids, b"".join(bodies), [len(b) for b in bodies], parts, 77, born, few
    )
    assert isinstance(run, PlainRun if few == 1 else PlainFew)
    one_by_one = [
        enc.prepare(topic, q, b, p, 0, 0, 77, born)
        for q, b, p in zip(queue_ids, bodies, props, strict=True)
    ]
    assert run.sizes == [p[TOTAL_SIZE] for p in one_by_one]
    assert run.sys_flag == one_by_one[0][SYS_FLAG] and len(run) == n
    qos = data.draw(st.lists(st.integers(0, 1 << 40), min_size=n, max_size=n))
    phys = list(accumulate(run.sizes[:-1], initial=data.draw(st.integers(0, 1 << 50))))
    assert enc.encode(run, qos, phys, 5) == enc.encode(one_by_one, qos, phys, 5)
    i = data.draw(st.integers(0, n))
    j = data.draw(st.integers(i, n))
    assert run[i:j].encode(qos[i:j], phys[i:j], 9) == enc.encode(
        one_by_one[i:j], qos[i:j], phys[i:j], 9
    )


@pytest.mark.parametrize("few", [1, 100])
def test_a_plain_run_checks_properties_length(few):
    r = tv4_record()
    enc = BatchEncoder(r.store_host)
    with pytest.raises(CorruptRecordError, match="properties are 32768 bytes"):
        enc.prepare_plain(b"T", [0, 0], b"ab", [1, 1], [b"x" * 32000, [b"", b"y" * 768]], 1,
                          r.born_host, few)  # fmt: skip
