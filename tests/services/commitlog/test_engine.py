"""The engine in process: what its gRPC face relies on."""

import errno
import os
import threading
import time

import pytest

from rmqstore import store_hosts
from rmqstore.errors import ResourceExhaustedError, StoreError, UnavailableError
from rmqstore.formats import commitlog
from rmqstore.layout import StoreLayout
from rmqstore.v1 import commitlog_pb2, common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine


@pytest.fixture
def engine(tmp_path):
    e = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=1 << 20))
    yield e
    e.close()


def test_read_refuses_an_answer_over_its_byte_limit(engine):
    results = engine.put(
        [common_pb2.Message(topic="T", body=bytes(1000), keys=f"k{i}") for i in range(10)]
    )
    offsets = [r.phy_offset for r in results]
    sizes = sum(r.size for r in results)
    assert [len(b) for b in engine.read(offsets, max_bytes=sizes)] == [r.size for r in results]
    with pytest.raises(ResourceExhaustedError, match="10 records are more than"):
        engine.read(offsets, max_bytes=sizes - 1)


def test_sync_puts_keep_flowing_through_the_periodic_snapshot(tmp_path):
    """The snapshot runs on the flush thread: it must flush, not wait for that very thread
    (which stalled every sync put for the 5 s flush timeout, then failed them)."""
    e = CommitLogEngine(
        WriterConfig(
            store=tmp_path / "store", segment_size=8 << 20, flush="sync", snapshot_interval_ms=20
        )
    )
    errors: list[BaseException] = []
    stop = threading.Event()

    def producer(p: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                e.put([common_pb2.Message(topic="T", body=b"x" * 100, keys=f"p{p}-{i}")])
            except BaseException as err:  # a FLUSH_DISK_TIMEOUT, with the bug
                errors.append(err)
                return
            i += 1

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    snapshots_before = e.flusher.housekeepings
    deadline = time.monotonic() + 20
    while e.flusher.housekeepings < snapshots_before + 30 and not errors:
        assert time.monotonic() < deadline, "the periodic snapshot stopped running"
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    e.close()
    assert errors == []


@pytest.mark.parametrize("columns", [False, True])
def test_a_batch_larger_than_a_segment_spans_several(tmp_path, columns):
    """A batch is cut where segments end (a blank record closes each) and every record lands
    whole, at the offset its answer names, with queue offsets counted on across the cut."""
    e = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=64 << 10))
    sizes = [(i * 97) % 3000 + 1000 for i in range(60)]  # 150 KiB of bodies per batch
    bodies = [bytes([i]) * size for i, size in enumerate(sizes)]
    try:
        stored = []
        for b in range(3):
            keys = [f"b{b}-{i}" for i in range(60)]
            if columns:
                batch = commitlog_pb2.MessageColumns(
                    topic="T", body_size=sizes, bodies=b"".join(bodies),
                    queue_id=[i % 3 for i in range(60)], tags=["t"], keys=keys,
                )  # fmt: skip
            else:
                batch = [
                    common_pb2.Message(topic="T", queue_id=i % 3, body=body, tags="t", keys=k)
                    for i, (body, k) in enumerate(zip(bodies, keys, strict=True))
                ]
            stored += list(e.put(batch))
        first, last = stored[0].phy_offset >> 16, stored[59].phy_offset >> 16
        assert last - first == 2  # the first batch reaches into a third segment
        for seg in e.segments.segments[:-1]:  # each full segment ends with a blank record
            pos, magic = 0, commitlog.MAGIC_V1
            while magic != commitlog.BLANK_MAGIC:
                size, magic = commitlog.peek(seg.map, pos)
                pos += size
            assert pos == seg.size
        records = [commitlog.decode(raw) for raw in e.read([r.phy_offset for r in stored])]
    finally:
        e.close()
    assert [r.physical_offset for r in records] == [s.phy_offset for s in stored]
    assert [r.body for r in records] == bodies * 3
    assert [r.keys for r in records] == [f"b{b}-{i}" for b in range(3) for i in range(60)]
    assert [r.queue_offset for r in records] == [s.queue_offset for s in stored]
    assert [r.queue_offset for r in records] == [i // 3 for i in range(180)]


def _messages(tag: str, n: int, size: int = 1000) -> list[common_pb2.Message]:
    return [
        common_pb2.Message(topic="T", queue_id=i % 2, body=bytes([i]) * size, keys=f"{tag}{i}")
        for i in range(n)
    ]


@pytest.mark.parametrize("fail_at", [1, 2], ids=["first write", "after a segment's tail"])
def test_a_failed_write_stores_nothing_acknowledged_and_stops_puts(tmp_path, monkeypatch,
                                                                   fail_at):
    """The disk fails a write (the whole batch, or a batch crossing into the next segment
    after its first part): the put fails, queue offsets are given back, later puts are refused
    with UNAVAILABLE, reads go on; a restart recovers and counts on from what is on disk."""
    store = tmp_path / "store"
    e = CommitLogEngine(WriterConfig(store=store, segment_size=64 << 10))
    first = e.put(_messages("a", 40))  # about 42 KiB: the next batch crosses into segment 2
    max_before, table_before = e.max_offset, dict(e.queue_table)
    real, calls = os.pwrite, []

    def failing(fd: int, data: bytes, at: int) -> int:
        calls.append(len(data))
        if len(calls) == fail_at:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, data, at)

    monkeypatch.setattr(os, "pwrite", failing)
    with pytest.raises(StoreError, match="put not stored: writing the commitlog at offset"):
        e.put(_messages("b", 40))
    monkeypatch.setattr(os, "pwrite", real)
    assert len(calls) == fail_at
    assert (e.max_offset, e.queue_table) == (max_before, table_before)
    with pytest.raises(UnavailableError, match="takes no more puts: restart it"):
        e.put(_messages("c", 1))
    assert [len(r) for r in e.read([r.phy_offset for r in first])] == [r.size for r in first]
    e.close()
    assert (store / "abort").exists()  # so the next start checks the tail

    e = CommitLogEngine(WriterConfig(store=store, segment_size=64 << 10))
    try:
        recovered = dict(e.queue_table)
        survivors = sum(recovered.values()) - sum(table_before.values())
        assert (survivors > 0, e.max_offset > max_before) == (fail_at == 2,) * 2
        again = e.put(_messages("c", 4))
        records = [commitlog.decode(raw) for raw in e.read([r.phy_offset for r in again])]
    finally:
        e.close()
    assert [r.physical_offset for r in records] == [r.phy_offset for r in again]
    assert [r.queue_offset for r in records] == [recovered[("T", i % 2)] + i // 2 for i in range(4)]


def test_a_short_write_is_finished(tmp_path, monkeypatch):
    """pwrite may write less than asked: the rest follows, nothing is lost."""
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: real(fd, memoryview(data)[:777], at))
    e = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=1 << 20))
    try:
        stored = e.put(_messages("s", 5, size=3000))
        records = [commitlog.decode(raw) for raw in e.read([r.phy_offset for r in stored])]
    finally:
        e.close()
    assert [r.body for r in records] == [bytes([i]) * 3000 for i in range(5)]


def _open_close(store, **kw) -> None:
    CommitLogEngine(WriterConfig(store=store, segment_size=1 << 20, **kw)).close()


def test_a_writer_records_each_new_store_host_a_slave_none(tmp_path):
    store = tmp_path / "store"
    _open_close(store, store_host="10.0.0.1:10911")
    _open_close(store, store_host="10.0.0.1:10911")
    _open_close(store, store_host="10.0.0.9:10911")
    assert store_hosts.recorded(StoreLayout.of(store)) == ["10.0.0.1:10911", "10.0.0.9:10911"]
    slave = tmp_path / "slave"
    _open_close(slave, store_host="10.0.0.5:10911", role="slave", ha_master="127.0.0.1:1")
    assert store_hosts.recorded(StoreLayout.of(slave)) == []
