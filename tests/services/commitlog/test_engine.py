"""The engine in process: what its gRPC face relies on."""

import threading
import time

import pytest

from rmqstore.errors import ResourceExhaustedError
from rmqstore.v1 import common_pb2
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
