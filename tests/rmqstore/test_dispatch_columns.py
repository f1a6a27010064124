"""Dispatch fields over columns agree with ``dispatch.from_meta`` record by record: tags
codes (the schedule topic's delivery times included), which records get a consume-queue unit,
and the index keys with their hashes, in ``dispatch.index_keys`` order."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqstore import dispatch
from rmqstore.dispatch_columns import dispatch_columns
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats.commitlog_columns import decode_columns
from rmqstore.formats.javahash import index_hashes
from rmqstore.layout import SCHEDULE_TOPIC
from tests.rmqstore.formats.test_commitlog import tv4_record

_words = st.text(st.sampled_from("ab 中\U0001f600\x01\x02#x"), max_size=8)
_segment = st.one_of(
    st.tuples(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "DELAY", "CLUSTER", "KEY", ""]),
              st.one_of(_words, st.sampled_from(["3", "-1", "0", "99", "x"])))
    .map(lambda nv: f"{nv[0]}\x01{nv[1]}"),
    _words,  # a segment without a name, or with stray separators
)
_properties = st.lists(_segment, max_size=6).map("\x02".join)
_record = st.tuples(
    st.sampled_from(["TopicA", "B", "中文", SCHEDULE_TOPIC, ""]),
    _properties,
    st.sampled_from([0, cl.TRANSACTION_PREPARED_TYPE, cl.TRANSACTION_COMMIT_TYPE,
                     cl.TRANSACTION_ROLLBACK_TYPE, cl.MULTI_TAGS_FLAG]),
    st.integers(0, 2**41),
)


def _encode(topic: str, properties: str, sys_flag: int, store_ts: int) -> bytes:
    r = tv4_record()
    r.topic, r.properties, r.sys_flag, r.store_timestamp = topic, properties, sys_flag, store_ts
    return cl.encode(r)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, max_size=12))
def test_columns_agree_with_dispatch_records(records):
    buf = b"".join(_encode(*r) for r in records) + bytes(8)
    cols, _, err = decode_columns(buf)
    assert err is None and len(cols) == len(records)
    got = dispatch_columns(cols)
    want = [dispatch.from_meta(m) for _, m in
            commitlog_segment.iter_segment(buf, decoder=cl.decode_meta)]
    assert got.tags_code.tolist() == [d.tags_code for d in want]
    assert got.goes_to_consume_queue.tolist() == [
        dispatch.goes_to_consume_queue(d.sys_flag) for d in want
    ]
    keys = [(i, k) for i, d in enumerate(want) for k in dispatch.index_keys(d)]
    assert got.key_record.tolist() == [i for i, _ in keys]
    hashes = index_hashes([k for _, k in keys]).tolist() if keys else []
    assert got.key_hash.tolist() == hashes


def test_the_last_of_repeated_keys_counts_and_empty_tokens_are_skipped():
    props = "KEYS\x01a b\x02UNIQ_KEY\x01U1\x02KEYS\x01  c  d \x02TAGS\x01t\x02TAGS\x01"
    buf = _encode("T", props, 0, 1) + _encode("T", "", 0, 2) + bytes(8)
    got = dispatch_columns(decode_columns(buf)[0])
    assert got.key_record.tolist() == [0, 0, 0]
    assert got.key_hash.tolist() == index_hashes(["T#U1", "T#c", "T#d"]).tolist()
    assert got.tags_code.tolist() == [dispatch.tags_code("T", {"TAGS": "t"}, 1), 0]


_texts = st.text(st.sampled_from("ab 中\U0001f600#x\x02"), max_size=10)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "主题", "", "T#"]), _texts, _texts,
                          st.sampled_from([0, 4, 8, 12])), max_size=12),
       st.sampled_from([0, 10**9]))  # over arrays, or record by record
def test_index_keys_of_dispatch_strings_agree_with_index_keys_of(rows, columns_from):
    import numpy as np

    from rmqstore.dispatch_columns import index_keys_of_texts

    topics = [r[0] for r in rows]
    record, hashes = index_keys_of_texts(topics, [r[1] for r in rows], [r[2] for r in rows],
                                         np.array([r[3] for r in rows], dtype=np.int64),
                                         columns_from)
    keys = [(i, k) for i, (t, u, ks, f) in enumerate(rows)
            for k in dispatch.index_keys_of(t, u, ks, f)]  # fmt: skip
    assert record.tolist() == [i for i, _ in keys]
    assert hashes.tolist() == (index_hashes([k for _, k in keys]).tolist() if keys else [])
