"""The golden RocketMQ store rebuilt in memory from its commitlog, compared byte for byte.

Consume-queue files and index files come from decoding the golden commitlog and feeding
``rmqstore.dispatch`` into the format modules; the checkpoint and index headers are checked
against expected.json, and the 40 index queries are run against each golden index file.
"""

from collections import defaultdict

import numpy as np
import pytest

from rmqstore.dispatch import from_record, goes_to_consume_queue, index_keys
from rmqstore.formats import checkpoint as ck
from rmqstore.formats import commitlog_segment
from rmqstore.formats import consume_queue as cq
from rmqstore.formats import index_file as ix
from rmqstore.formats.javahash import index_hashes
from rmqstore.segments import parse_segment_name

pytestmark = pytest.mark.golden


@pytest.fixture(scope="module")
def dispatched(golden_store):
    out = []
    for path in sorted((golden_store / "commitlog").iterdir()):
        base = parse_segment_name(path.name)
        data = path.read_bytes()
        out += [from_record(r) for _, r in commitlog_segment.iter_segment(data, base_offset=base)]
    return out


def _index_config(expected):
    return expected["config"]["maxHashSlotNum"], expected["config"]["maxIndexNum"]


def test_consume_queue_files_rebuilt_byte_for_byte(golden_store, golden_expected, dispatched):
    per_file = golden_expected["config"]["mappedFileSizeConsumeQueue"]
    queues: dict[tuple[str, int], bytearray] = defaultdict(bytearray)
    for d in dispatched:
        if not goes_to_consume_queue(d.sys_flag):
            continue
        buf = queues[(d.topic, d.queue_id)]
        at = d.queue_offset * cq.UNIT_SIZE
        buf.extend(bytes(max(0, at + cq.UNIT_SIZE - len(buf))))
        buf[at : at + cq.UNIT_SIZE] = cq.encode(cq.CqUnit(d.phy_offset, d.size, d.tags_code))
    built = {}
    for (topic, qid), buf in queues.items():
        for start in range(0, len(buf), per_file):
            chunk = bytes(buf[start : start + per_file]).ljust(per_file, b"\0")
            built[f"{topic}/{qid}/{start:020d}"] = chunk
    on_disk = {
        f"{f['topic']}/{f['queueId']}/{f['name']}": (golden_store / "consumequeue" / f["topic"]
                                                      / str(f["queueId"]) / f["name"]).read_bytes()
        for f in golden_expected["files"]["consumequeue"]
    }
    assert len(on_disk) == 27
    assert sorted(built) == sorted(on_disk)
    for name, data in on_disk.items():
        assert built[name] == data, name
    # and the units decode to expected.json's entries, queue offsets from the file names
    for key, entries in golden_expected["consumeQueues"].items():
        topic, qid = key.split("/")
        units = []
        for name in sorted(n for n in on_disk if n.startswith(f"{key}/")):
            first = parse_segment_name(name.rsplit("/", 1)[1]) // cq.UNIT_SIZE
            arr = cq.units(on_disk[name])[: cq.valid_count(on_disk[name])]
            units += [(first + i, int(u["offset"]), int(u["size"]), int(u["tags_code"]))
                      for i, u in enumerate(arr)]
        assert units == [(e["queueOffset"], e["phyOffset"], e["size"], e["tagsCode"])
                         for e in entries]


def test_index_file_headers(golden_store, golden_expected):
    slots, entries = _index_config(golden_expected)
    for f in golden_expected["files"]["index"]:
        data = (golden_store / "index" / f["name"]).read_bytes()
        assert len(data) == f["size"] == ix.file_size(slots, entries)
        assert data[: ix.HEADER_SIZE].hex() == f["rawHeader"]
        h = ix.IndexFile(data, slots, entries).header
        assert h == ix.IndexHeader(f["beginTimestamp"], f["endTimestamp"], f["beginPhyOffset"],
                                   f["endPhyOffset"], f["hashSlotCount"], f["indexCount"])


def test_index_files_rebuilt_from_commitlog(golden_store, golden_expected, dispatched):
    """Both files come out byte-identical (our first-entry rule is tested in TV11)."""
    slots, entries = _index_config(golden_expected)
    keys, phys, times = [], [], []
    for d in dispatched:
        for k in index_keys(d):
            keys.append(k)
            phys.append(d.phy_offset)
            times.append(d.store_timestamp)
    hashes = index_hashes(keys).astype(np.int64)
    phys_a, times_a = np.array(phys, dtype=np.int64), np.array(times, dtype=np.int64)
    built, done = [], 0
    while done < len(keys):
        f = ix.IndexFile(bytearray(ix.file_size(slots, entries)), slots, entries)
        done += f.put_many(hashes[done:], phys_a[done:], times_a[done:])
        built.append(bytes(f.buf))
    names = [f["name"] for f in golden_expected["files"]["index"]]
    assert len(built) == len(names) == 2
    golden = [(golden_store / "index" / n).read_bytes() for n in names]
    assert built == golden
    # The roll-over message put its UNIQ_KEY in file 1 and its KEYS in file 2, so file 2's first
    # entry has the previous file's end time as its own and Q2 leaves no trace here.
    g = ix.IndexFile(golden[1], slots, entries)
    assert g.header.begin_timestamp == golden_expected["files"]["index"][0]["endTimestamp"]
    assert g.entry(1)[2] == 0


def test_checkpoint(golden_store, golden_expected):
    data = (golden_store / "checkpoint").read_bytes()
    exp = golden_expected["checkpoint"]
    assert len(data) == exp["fileSize"] == ck.FILE_SIZE
    cp = ck.decode(data)
    assert cp.physic_msg_timestamp == exp["physicMsgTimestamp"]
    assert cp.logics_msg_timestamp == exp["logicsMsgTimestamp"]
    assert cp.index_msg_timestamp == exp["indexMsgTimestamp"]
    assert cp.min_timestamp == exp["minTimestamp"]
    assert cp.min_timestamp_index == exp["minTimestampIndex"]
    assert data[24:] == bytes(len(data) - 24)


def test_select_phy_offsets_per_index_file(golden_store, golden_expected):
    slots, entries = _index_config(golden_expected)
    cap = golden_expected["config"]["maxMsgsNumBatch"]
    files = {f["name"]: ix.IndexFile((golden_store / "index" / f["name"]).read_bytes(),
                                     slots, entries)
             for f in golden_expected["files"]["index"]}
    queries = golden_expected["queries"]
    assert len(queries) == 40
    checked = 0
    for q in queries:
        key = ix.build_key(q["topic"], q["key"])
        for per in q["expected"]["perIndexFile"]:
            f = files[per["file"]]
            assert f.is_time_matched(q["begin"], q["end"]) == per["isTimeMatched"], q["id"]
            got = f.select_phy_offsets(key, min(q["maxNum"], cap), q["begin"], q["end"])
            assert got == per["selectPhyOffset"], (q["id"], per["file"])
            checked += bool(got)
    assert checked > 20  # most queries hit something; an all-empty run would prove nothing
