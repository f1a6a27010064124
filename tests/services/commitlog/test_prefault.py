"""Pages ahead of the write position are mapped in the background, and only ahead of it."""

import time

import pytest

from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.segment_files import PAGE

WINDOW = 256 * 1024


def _engine(tmp_path, window):
    return CommitLogEngine(
        WriterConfig(store=tmp_path / "store", segment_size=1 << 20, prefault_window=window)
    )


def _wait_for(cond, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def test_the_window_ahead_of_the_writer_is_populated(tmp_path):
    engine = _engine(tmp_path, WINDOW)
    try:
        if not engine.prefaulter.supported:
            pytest.skip("this kernel or libc has no madvise for the pre-faulter")
        msgs = [common_pb2.Message(topic="P", body=bytes(1000)) for _ in range(300)]
        results = engine.put(msgs)
        head = engine._head
        assert head is not None
        ahead = head.wrote + WINDOW
        _wait_for(lambda: head.populated >= ahead - ahead % PAGE or engine.prefaulter.off_reason)
        if engine.prefaulter.off_reason:
            pytest.skip(f"pre-faulting is off here: {engine.prefaulter.off_reason}")
        assert head.populated <= min(ahead, head.size)  # never more than the window
        wakes = engine.prefaulter.wakes
        engine.put(msgs[:50])  # 50 KB: more than half the window is still populated ahead
        assert engine.prefaulter.wakes == wakes
        rolled = engine.put(msgs * 3)  # across a segment boundary: the new head is served too
        assert engine._head is not head
        new_head = engine._head
        _wait_for(lambda: new_head.populated >= WINDOW)
        raws = engine.read([r.phy_offset for r in [*results, *rolled]])
        assert all(len(r) == res.size for r, res in zip(raws, [*results, *rolled], strict=True))
    finally:
        engine.close()
    assert not engine.prefaulter._thread.is_alive()


def test_window_zero_turns_it_off(tmp_path):
    engine = _engine(tmp_path, 0)
    try:
        engine.put([common_pb2.Message(topic="P", body=bytes(1000))])
        assert not engine.prefaulter._thread.is_alive()
        assert engine.prefaulter.populated_bytes == 0
    finally:
        engine.close()
