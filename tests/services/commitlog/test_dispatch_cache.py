"""The in-memory tail of dispatch batches: contiguous chunks, merging, eviction."""

from rmqstore.v1 import commitlog_pb2
from services.commitlog.dispatch_cache import DispatchCache
from services.commitlog.wire_batch import WireBatch


def _chunk(start: int, n: int, size: int = 10) -> WireBatch:
    phys = [start + i * size for i in range(n)]
    return WireBatch.of(commitlog_pb2.DispatchBatch(phy_offset=phys, size=[size] * n,
                                                    next_offset=start + n * size))


def _phys(batch: WireBatch | None) -> list[int]:
    assert batch is not None
    return list(batch.parse().phy_offset)


def test_take_merges_chunks_from_a_chunk_start():
    c = DispatchCache()
    pos = 0
    for n in (3, 1, 4):
        c.add(pos, pos + n * 10, _chunk(pos, n))
        pos += n * 10
    merged = c.take(0, 100)
    assert merged is not None and merged.records == 8 and merged.next_offset == 80
    assert _phys(merged) == list(range(0, 80, 10)) and merged.parse().next_offset == 80
    assert _phys(c.take(30, 100)) == [30, 40, 50, 60, 70]
    assert len(_phys(c.take(0, 2))) == 3  # a chunk is never split: the limit is soft
    assert c.take(10, 100) is None  # not a chunk start: the caller decodes files instead
    assert c.records_from(0, 100) == 8 and c.records_from(0, 2) == 3  # whole chunks
    assert c.records_from(10, 100) is None
    assert c.take(80, 100) is None


def test_eviction_by_records_and_chunks_and_gap_reset():
    c = DispatchCache(max_records=5, max_chunks=3)
    for k in range(6):
        c.add(k * 10, k * 10 + 10, _chunk(k * 10, 1))
    assert c.take(0, 10) is None and c.take(20, 10) is None
    assert _phys(c.take(30, 10)) == [30, 40, 50]
    c.add(100, 110, _chunk(100, 1))  # not contiguous: older chunks are dropped
    assert c.take(30, 10) is None and _phys(c.take(100, 10)) == [100]
