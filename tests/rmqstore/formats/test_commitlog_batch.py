"""The batch encoder writes exactly the bytes of the one-record encoder (TV4 included)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog as cl
from rmqstore.formats.commitlog_batch import SYS_FLAG, TOTAL_SIZE, BatchEncoder
from tests.rmqstore.formats.test_commitlog import TV4, _records, tv4_record


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
def test_a_batch_is_the_records_one_after_another(records, store_ts):
    store_host = records[0].store_host
    enc = BatchEncoder(store_host)
    prepared = [_prepare(enc, r) for r in records]
    got = enc.encode(
        prepared, [r.queue_offset for r in records], [r.physical_offset for r in records], store_ts
    )
    want = []
    for r, p in zip(records, prepared, strict=True):
        r.store_host, r.store_timestamp = store_host, store_ts
        one = cl.encode(r)
        assert p[TOTAL_SIZE] == len(one)
        assert p[SYS_FLAG] == cl.decode(one).sys_flag
        want.append(one)
    assert got == b"".join(want)


def test_sizes_are_checked():
    r = tv4_record()
    enc = BatchEncoder(r.store_host)
    r.topic = "t" * 128
    with pytest.raises(CorruptRecordError, match="128 bytes"):
        _prepare(enc, r)
    r.topic, r.properties = "T", "a\x01" + "b" * 32766
    with pytest.raises(CorruptRecordError, match="properties"):
        _prepare(enc, r)
