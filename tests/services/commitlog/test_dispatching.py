"""Dispatch in process: subscribers get the records appended, from the cache or decoded from
the files, and linger for more while little is waiting."""

import threading
import time

import pytest

from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.dispatching import LINGER_BELOW
from services.commitlog.engine import CommitLogEngine


def _stream_all(engine: CommitLogEngine, name: str, max_records: int) -> list:
    """Every dispatch record from offset 0 to the head, one tuple per record."""
    out = []
    for wire in engine.subscribe(name, 0, max_records, lambda: True):
        batch = wire.parse()
        assert wire.records == len(batch.phy_offset) and wire.next_offset == batch.next_offset
        fields = (batch.topic, batch.queue_id, batch.queue_offset, batch.phy_offset, batch.size,
                  batch.tags_code, batch.store_timestamp, batch.keys, batch.unique_key,
                  batch.sys_flag, batch.prepared_transaction_offset)  # fmt: skip
        out += list(zip(*fields, strict=True))
        if batch.next_offset >= engine.max_offset:
            return out
    raise AssertionError("the stream ended early")


@pytest.mark.parametrize("max_records", [1, 7, 4096])
def test_dispatch_decoded_from_the_files_equals_what_the_puts_dispatched(tmp_path, max_records):
    """A subscriber behind the in-memory cache gets batches decoded from the segment files;
    they must be the very records the put path dispatched: across segment ends (blank
    records), schedule-topic and transactional records, non-ASCII keys and repeated tokens."""
    e = CommitLogEngine(WriterConfig(store=tmp_path / "store", segment_size=64 << 10))
    try:
        for i in range(300):
            e.put([
                common_pb2.Message(topic=f"T{i % 3}", queue_id=i % 4, body=bytes(i % 700),
                                   tags=["", "a", "订单"][i % 3], keys=f"k{i}  k{i % 5} 键{i}"),
                common_pb2.Message(topic="T0", body=b"later", keys=f"d{i}", delay_level=i % 4),
                common_pb2.Message(topic="T1", body=b"tx", keys=f"x{i}",
                                   sys_flag=[0, 4, 8, 12][i % 4]),
            ])  # fmt: skip
        assert len(e.segments.segments) > 3  # several blank-ended segments
        cached = _stream_all(e, "cached", max_records)
        e.cache.clear()
        decoded = _stream_all(e, "decoded", max_records)
    finally:
        e.close()
    assert len(cached) == 900
    assert decoded == cached


def _first_batch(engine: CommitLogEngine, got: list) -> threading.Thread:
    def take() -> None:
        got.append(next(iter(engine.subscribe("s", 0, 100_000, lambda: True))))

    t = threading.Thread(target=take)
    t.start()
    return t


def test_a_subscriber_that_caught_up_lingers_for_more_puts(tmp_path):
    """Once it has caught up, the puts right behind the next one join its batch (bounded by
    the linger and by ``LINGER_BELOW`` bytes of records); one with records waiting takes them
    at once."""
    e = CommitLogEngine(
        WriterConfig(store=tmp_path / "store", segment_size=16 << 20, dispatch_linger_ms=1000)
    )
    got: list = []
    try:
        taker = _first_batch(e, got)  # nothing stored yet: it waits at the head
        e.put([common_pb2.Message(topic="T", body=b"x")])
        for _ in range(200):  # woken by the put, it lingers
            if e._lingering:
                break
            time.sleep(0.05)
        half = [common_pb2.Message(topic="T", body=bytes(LINGER_BELOW // 64))] * 32
        e.put(half)
        assert taker.is_alive() and not got  # under LINGER_BELOW: it lingers on
        e.put(half)  # together over LINGER_BELOW: the wait ends
        taker.join(10)
        assert got[0].records == 65
        behind: list = []
        _first_batch(e, behind).join(10)
        assert behind[0].records == 65
    finally:
        e.close()


def test_a_subscriber_without_linger_takes_each_put_at_once(tmp_path):
    """``linger=False`` (long polling's wake-ups): the first put's batch comes at once,
    however long the writer would let a builder linger."""
    e = CommitLogEngine(
        WriterConfig(store=tmp_path / "store", segment_size=8 << 20, dispatch_linger_ms=1000)
    )
    got: list = []
    try:
        taker = threading.Thread(target=lambda: got.append(
            next(iter(e.subscribe("s", 0, 100_000, lambda: True, linger=False)))))  # fmt: skip
        taker.start()
        e.put([common_pb2.Message(topic="T", body=b"x")])
        for _ in range(10_000):  # (lingering, it would show in ``_lingering`` for a second)
            if got or e._lingering:
                break
            time.sleep(0.001)
        assert got and got[0].records == 1 and not e._lingering
        taker.join(10)
    finally:
        e.close()


def test_closing_ends_a_linger(tmp_path):
    """A subscriber lingering for more puts when the engine closes ends without a batch."""
    e = CommitLogEngine(
        WriterConfig(store=tmp_path / "store", segment_size=8 << 20, dispatch_linger_ms=1000)
    )
    got: list = []
    taker = threading.Thread(
        target=lambda: got.extend(e.subscribe("s", 0, 100_000, lambda: True))
    )
    taker.start()
    e.put([common_pb2.Message(topic="T", body=b"x")])  # wakes it; it lingers
    for _ in range(100):
        if e._lingering:
            break
        time.sleep(0.05)
    assert e._lingering
    e.close()
    taker.join(10)
    assert not taker.is_alive() and got == []
