"""Dispatch record (spec §5.1, §5.3, §6.2, TV13)."""

import pytest

from rmqstore import delay
from rmqstore.dispatch import from_record, goes_to_consume_queue, index_keys, tags_code
from rmqstore.formats import commitlog as cl
from rmqstore.formats import commitlog_segment
from rmqstore.formats import properties as p
from rmqstore.layout import SCHEDULE_TOPIC


def test_tv13_delay_level_3():
    props = {"DELAY": "3", "REAL_TOPIC": "TopicTest", "REAL_QID": "0", "TAGS": "TagA"}
    code = tags_code(SCHEDULE_TOPIC, props, 1700000000123)
    assert code == 1700000010123
    assert code.to_bytes(8, "big").hex().upper() == "0000018BCFE58F8B"
    assert delay.delay_ms(3) == 10_000 and 3 - 1 == 2  # queue id of level 3


def test_tv13_level_99_clamps_to_18():
    assert delay.MAX_LEVEL == 18 and delay.clamp_level(99) == 18
    assert tags_code(SCHEDULE_TOPIC, {"DELAY": "99"}, 1700000000123) == 1700000000123 + 7_200_000
    assert delay.clamp_level(99) - 1 == 17


def test_delay_levels_in_ms():
    assert delay.LEVELS_MS == [1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000,
                               360000, 420000, 480000, 540000, 600000, 1200000, 1800000,
                               3600000, 7200000]


@pytest.mark.parametrize(
    ("topic", "props", "code"),
    [
        ("TopicTest", {"TAGS": "TagA", "DELAY": "3"}, 2598919),  # DELAY only counts on schedule
        (SCHEDULE_TOPIC, {"TAGS": "TagA"}, 2598919),  # schedule topic without DELAY
        (SCHEDULE_TOPIC, {"DELAY": "0", "TAGS": "refund"}, -934813832),
        ("TopicTest", {}, 0),
        ("TopicTest", {"TAGS": ""}, 0),
    ],
)
def test_tags_code_cases(topic, props, code):
    assert tags_code(topic, props, 1700000000123) == code


def _record(sys_flag: int, props: dict[str, str]) -> cl.Record:
    r = cl.Record(topic="T", queue_id=1, body=b"x", properties=p.encode(props), sys_flag=sys_flag,
                  queue_offset=4, physical_offset=400, store_timestamp=1700000000000)
    return cl.decode(cl.encode(r))


def test_from_record_and_index_keys():
    d = from_record(_record(0, {"KEYS": " a  b ", "UNIQ_KEY": "U1", "TAGS": "TagA"}))
    assert (d.topic, d.queue_id, d.queue_offset, d.phy_offset) == ("T", 1, 4, 400)
    assert d.size == 91 + 1 + 1 + len(p.encode({"KEYS": " a  b ", "UNIQ_KEY": "U1",
                                                 "TAGS": "TagA"}).encode())
    assert d.tags_code == 2598919 and d.keys == " a  b " and d.uniq_key == "U1"
    assert index_keys(d) == ["T#U1", "T#a", "T#b"]  # empty split tokens are skipped


@pytest.mark.parametrize(
    ("sys_flag", "in_cq", "indexed"),
    [(0x0, True, True), (0x8, True, True), (0x4, False, True), (0xC, False, False),
     (0x1 | 0x8, True, True), (0x10 | 0xC, False, False)],
)
def test_transaction_types(sys_flag, in_cq, indexed):
    d = from_record(_record(sys_flag, {"KEYS": "k", "UNIQ_KEY": "U"}))
    assert goes_to_consume_queue(d.sys_flag) is in_cq
    assert bool(index_keys(d)) is indexed


@pytest.mark.golden
def test_from_meta_equals_from_record_on_every_golden_record(golden_store):
    from rmqstore.dispatch import from_meta, from_record
    from rmqstore.formats import commitlog
    from rmqstore.segments import parse_segment_name

    n = 0
    for path in sorted((golden_store / "commitlog").iterdir()):
        data, base = path.read_bytes(), parse_segment_name(path.name)
        walk = commitlog_segment.iter_segment
        metas = list(walk(data, base_offset=base, decoder=commitlog.decode_meta))
        recs = list(commitlog_segment.iter_segment(data, base_offset=base))
        assert [p for p, _ in metas] == [p for p, _ in recs]
        for (_, m), (_, r) in zip(metas, recs, strict=True):
            assert from_meta(m) == from_record(r)
            n += 1
    assert n == 200
