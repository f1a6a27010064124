"""The 200 golden messages put through our writer give RocketMQ's bytes (store time aside)."""

import json

import pytest

from rmqstore.formats import commitlog, commitlog_segment
from rmqstore.segments import parse_segment_name
from services.cli.put import message_from_json
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine

pytestmark = pytest.mark.golden


def _golden_records(golden_store):
    out = {}
    for path in sorted((golden_store / "commitlog").iterdir()):
        base = parse_segment_name(path.name)
        data = path.read_bytes()
        for pos, rec in commitlog_segment.iter_segment(data, base_offset=base):
            out[base + pos] = (rec, data[pos : pos + rec.total_size])
    return out


def _open(store, host):
    return CommitLogEngine(WriterConfig(store=store, segment_size=65536, store_host=host))


def _put_golden(store, golden_dir):
    """Put each golden message, one at a time as RocketMQ's putMessage received them.

    The store host is a writer setting, so the writer is restarted with the IPv6 host for the
    messages RocketMQ stored with one (this also exercises clean restarts).
    """
    engine, host, results = None, None, []
    for line in (golden_dir / "messages.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["storeHost"] != host:
            if engine is not None:
                engine.close()
            host = d["storeHost"]
            engine = _open(store, host)
        earlier = [r for _, r in results]
        results.append((d, engine.put([message_from_json(d, earlier)])[0]))
    return engine, results


@pytest.fixture
def put_golden(tmp_path, golden_dir):
    engine, results = _put_golden(tmp_path / "store", golden_dir)
    yield engine, results
    engine.close()


def test_records_match_rocketmq_bytes_except_store_time(put_golden, golden_dir, golden_expected):
    engine, results = put_golden
    golden = _golden_records(golden_dir / "store")
    checked = 0
    for (_d, r), m in zip(results, golden_expected["messages"], strict=True):
        exp = m["stored"]
        assert r.phy_offset == exp["phyOffset"]
        ours = engine.read([r.phy_offset])[0]
        rec = commitlog.decode(ours)
        assert rec.properties == exp["propertiesString"], m["i"]
        assert (rec.topic, rec.queue_id) == (exp["topic"], exp["queueId"])
        assert rec.queue_offset == exp["queueOffset"]
        assert rec.sys_flag == exp["sysFlag"] and rec.total_size == exp["totalSize"]
        assert rec.body_crc == exp["bodyCRC"]
        # byte for byte, once RocketMQ's store time and our own physical offset are aligned
        g_rec, g_bytes = golden[exp["phyOffset"]]
        patched = bytearray(ours)
        commitlog.patch(
            patched, 0, rec.queue_offset, g_rec.physical_offset, g_rec.store_timestamp, rec.sys_flag
        )
        assert bytes(patched) == g_bytes
        checked += 1
    assert checked == 200


def test_segments_and_blank_records_match_rocketmq(put_golden, golden_expected):
    engine, _ = put_golden
    assert engine.max_offset == golden_expected["commitlogMaxOffset"]
    for b in golden_expected["blankRecords"]:
        seg = engine.segments.find(b["phyOffset"])
        pos = b["phyOffset"] - seg.start
        assert bytes(seg.map[pos : pos + 8]) == commitlog.blank(b["declaredSize"])
