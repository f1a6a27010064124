"""Recovery cuts a damaged tail at the last good record and keeps queue offsets right."""

import os

import pytest

from rmqstore.errors import StoreError
from rmqstore.formats import commitlog
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name
from rmqstore.v1 import common_pb2
from services.commitlog import segment_scan
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.recovery import save_snapshot, zero_tail
from services.commitlog.segment_files import Segment

SEGMENT = 64 * 1024


@pytest.fixture(autouse=True, params=["here", "workers"])
def where(request, monkeypatch):
    """Every case twice: segments read in this process, and by forked worker processes."""
    if request.param == "workers":
        monkeypatch.setattr(segment_scan, "PARALLEL_BYTES", 0)
    return request.param


def _open(store):
    return CommitLogEngine(WriterConfig(store=store, segment_size=SEGMENT))


def _msgs(n, start=0):
    return [
        common_pb2.Message(topic="T", queue_id=0, body=f"message {i}".encode() * 20, keys=f"k{i}")
        for i in range(start, start + n)
    ]


@pytest.fixture
def store(tmp_path):
    e = _open(tmp_path / "s")
    results = e.put(_msgs(300))  # spans several segments
    e.close()
    return tmp_path / "s", results


def _damage(store_dir, offset, at, data):
    path = store_dir / "commitlog" / segment_name(offset - offset % SEGMENT)
    with open(path, "r+b") as f:
        f.seek(offset % SEGMENT + at)
        f.write(data)


def _reopen_and_check(store_dir, results, keep, corrupt=True):
    e = _open(store_dir)
    try:
        assert e.max_offset == results[keep].phy_offset
        assert bool(e.recovered.corruption) == corrupt  # zeros just look like the end of data
        for r in results[:keep]:
            assert commitlog.decode(e.read([r.phy_offset])[0]).keys == f"k{r.queue_offset}"
        nxt = e.put(_msgs(1, 10_000))[0]
        assert nxt.queue_offset == keep  # queue offsets continue right after the cut
        assert nxt.phy_offset == results[keep].phy_offset
    finally:
        e.close()
    return nxt


@pytest.mark.parametrize("what", ["body", "header", "properties", "torn", "zeros"])
def test_damaged_last_record_is_cut(store, what):
    store_dir, results = store
    last = results[-1]
    if what == "body":
        _damage(store_dir, last.phy_offset, 90, b"\xff")
    elif what == "header":
        _damage(store_dir, last.phy_offset, 4, b"\x00\x00")  # magic
    elif what == "properties":
        _damage(store_dir, last.phy_offset, last.size - 3, b"\xff\xff")
    elif what == "zeros":
        _damage(store_dir, last.phy_offset, 0, bytes(last.size))
    else:
        _damage(store_dir, last.phy_offset, last.size // 2, bytes(last.size - last.size // 2))
    _reopen_and_check(store_dir, results, len(results) - 1, corrupt=what != "zeros")


def test_damage_in_the_middle_cuts_everything_after_it(store):
    store_dir, results = store
    mid = len(results) - 40
    _damage(store_dir, results[mid].phy_offset, 95, b"\x00\x01\x02")
    nxt = _reopen_and_check(store_dir, results, mid)
    # the cut records are gone for good (zeroed): after one more put they cannot come back
    e = _open(store_dir)
    try:
        assert e.max_offset == nxt.phy_offset + nxt.size
        assert not e.recovered.corruption
    finally:
        e.close()


def test_stray_preallocated_segments_are_removed(store):
    store_dir, results = store
    end = results[-1].phy_offset + results[-1].size
    stray = store_dir / "commitlog" / segment_name(end - end % SEGMENT + 3 * SEGMENT)
    with open(stray, "wb") as f:
        f.truncate(SEGMENT)
    e = _open(store_dir)
    try:
        assert not stray.exists()
        assert e.max_offset == end
    finally:
        e.close()


def test_a_segment_of_the_wrong_size_stops_the_start(store):
    store_dir, _ = store
    path = store_dir / "commitlog" / segment_name(0)
    os.truncate(path, SEGMENT // 2)
    with pytest.raises(StoreError, match="segment size"):
        _open(store_dir)


def _mixed(n, start=0):
    """Several topics and queues; every fifth message a prepared transaction on its own
    topic (it takes no queue offset, so that topic never enters the table)."""
    return [
        common_pb2.Message(
            topic="Tx" if i % 5 == 0 else f"T{i % 3}", queue_id=i % 4,
            body=b"m" * (900 + i % 100),
            sys_flag=commitlog.TRANSACTION_PREPARED_TYPE if i % 5 == 0 else 0,
        )
        for i in range(start, start + n)
    ]


@pytest.mark.parametrize("snapshot_after", [None, 20, 250, "past the end"])
def test_queue_offsets_come_out_the_same_wherever_the_snapshot_lies(tmp_path, snapshot_after):
    """The checked segments count queue offsets while they are checked, from the snapshot on;
    earlier segments are walked. No snapshot, one in an early (unchecked) segment, one in a
    checked segment and one past the recovered end (ignored) give the same table."""
    store_dir = tmp_path / "s"
    e = _open(store_dir)
    first = 0 if snapshot_after in (None, "past the end") else snapshot_after
    e.put(_mixed(first))
    snap = (e.max_offset, dict(e.queue_table))
    results = e.put(_mixed(300 - first, first))
    expected = dict(e.queue_table)
    last_time = results[-1].store_timestamp
    e.close()
    assert not any(topic == "Tx" for topic, _ in expected)
    assert store_dir.joinpath("commitlog", segment_name(4 * SEGMENT)).exists()  # > 3 segments
    snapshot = StoreLayout.of(store_dir).progress("commitlog-queues")
    if snapshot_after is None:
        snapshot.unlink()
    elif snapshot_after == "past the end":
        save_snapshot(snapshot, 10 * SEGMENT, {("T0", 0): 10_000})
    else:
        save_snapshot(snapshot, *snap)
    (store_dir / "abort").write_bytes(b"")
    e = _open(store_dir)
    try:
        assert e.queue_table == expected
        assert e.recovered.last_store_timestamp == last_time
        assert e.put(_mixed(1, 1))[0].queue_offset == expected[("T1", 1)]
    finally:
        e.close()


def test_the_tail_after_the_cut_is_zeroed_between_holes_too(tmp_path):
    """Only ranges the file system holds data for are read; junk in any of them is zeroed."""
    path = tmp_path / segment_name(0)
    size = 4 * 1024 * 1024
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: holes everywhere
        for at in (100, 5000, 1024 * 1024 + 7, size - 3):
            f.seek(at)
            f.write(b"junk")
    seg = Segment(path, 0, size)
    try:
        zero_tail(seg, 102)
        assert seg.map[:102] == b"\x00" * 100 + b"ju"
        assert seg.map[102:] == bytes(size - 102)
    finally:
        seg.close()
