"""Every record of the golden RocketMQ commitlog decodes to what RocketMQ wrote."""

import pytest

from rmqstore.dispatch import from_record
from rmqstore.formats import commitlog, commitlog_segment
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.segments import parse_segment_name
from tests.rmqstore.formats.test_commitlog_segment import _reference_tally

pytestmark = pytest.mark.golden


def _segments(golden_store):
    for path in sorted((golden_store / "commitlog").iterdir()):
        yield parse_segment_name(path.name), path.read_bytes()


def test_every_record_decodes_and_matches(golden_store, golden_expected):
    stored = {m["stored"]["phyOffset"]: m["stored"] for m in golden_expected["messages"]}
    seen, blanks = 0, []
    for base, data in _segments(golden_store):
        end, blank, err = commitlog_segment.scan_end(data, base_offset=base)
        assert err is None
        if blank:
            blanks.append({"phyOffset": base + blank.position, "declaredSize": blank.declared_size})
        for pos, rec in commitlog_segment.iter_segment(data, base_offset=base):
            exp = stored[base + pos]
            assert rec.physical_offset == base + pos
            assert rec.total_size == exp["totalSize"]
            assert rec.topic == exp["topic"] and rec.queue_id == exp["queueId"]
            assert rec.queue_offset == exp["queueOffset"]
            assert rec.sys_flag == exp["sysFlag"] and rec.flag == exp["flag"]
            assert rec.born_timestamp == exp["bornTimestamp"]
            assert rec.store_timestamp == exp["storeTimestamp"]
            assert str(rec.born_host) == exp["bornHost"]
            assert str(rec.store_host) == exp["storeHost"]
            assert rec.born_host.pack().hex() == exp["bornHostHex"]
            assert rec.store_host.pack().hex() == exp["storeHostHex"]
            assert rec.reconsume_times == exp["reconsumeTimes"]
            assert rec.prepared_transaction_offset == exp["preparedTransactionOffset"]
            assert rec.body_crc == exp["bodyCRC"] == commitlog.body_crc(rec.body)
            assert len(rec.body) == exp["bodyLength"]
            assert rec.properties == exp["propertiesString"]
            assert rec.property_map == exp["properties"]
            assert offset_msg_id(rec.store_host.ip, rec.store_host.port, base + pos) == exp["msgId"]
            d = from_record(rec)
            assert d.tags_code == exp["tagsCode"]
            assert d.keys == (exp["keys"] or "") and d.uniq_key == (exp["uniqKey"] or "")
            # re-encoding reproduces the bytes exactly
            assert commitlog.encode(rec) == data[pos : pos + rec.total_size]
            seen += 1
    assert seen == len(golden_expected["messages"]) == 200
    assert [(b["phyOffset"], b["declaredSize"]) for b in blanks] == [
        (b["phyOffset"], b["declaredSize"]) for b in golden_expected["blankRecords"]
    ]


def test_properties_reserialize_in_hashmap_order(golden_expected):
    for m in golden_expected["messages"]:
        s = m["stored"]["propertiesString"]
        assert props_fmt.encode(props_fmt.parse(s)) == s


def test_the_queue_tally_agrees_with_counting_record_by_record(golden_store):
    for base, data in _segments(golden_store):
        records = [(pos, r) for pos, r in commitlog_segment.iter_segment(data, base_offset=base)
                   if pos >= 1]  # all but the first record
        tally = commitlog_segment.QueueTally(count_from=1)
        commitlog_segment.scan_end(data, 0, True, base, tally)
        assert (tally.next_offsets, tally.last_position) == _reference_tally(records)
        assert tally.next_offsets  # the golden store's queues are there to count
