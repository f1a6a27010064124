"""Retention's choices on a real engine, with the clock and the disk's fill ratio given."""

import datetime as dt
import os

import pytest

from rmqstore.errors import OffsetOutOfRangeError
from rmqstore.v1 import common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CONSUME_QUEUE_SUBSCRIBER, INDEX_SUBSCRIBER, CommitLogEngine
from services.commitlog.retention import Retention

SEGMENT = 65536
HOUR = 3600.0


@pytest.fixture
def engine(tmp_path):
    e = CommitLogEngine(WriterConfig(store=tmp_path, segment_size=SEGMENT, delete_when="4",
                                     retention_hours=72))  # fmt: skip
    for i in range(40):  # ~4 segments
        e.put([common_pb2.Message(topic="T", body=bytes(6000), keys=f"k{i}")])
    yield e
    e.close()


def _age_segments(engine, seconds: float) -> None:
    for seg in engine.segments.segments:
        st = seg.path.stat()
        os.utime(seg.path, (st.st_atime - seconds, st.st_mtime - seconds))


def _retention(engine, ratio=0.1, hour=4):
    # a clock at ``hour`` o'clock local time, today
    now = dt.datetime.now().replace(hour=hour, minute=30).timestamp()
    return Retention(engine, clock=lambda: now, disk_ratio=lambda: ratio)


def _acked(engine, offset=None):
    for name in (CONSUME_QUEUE_SUBSCRIBER, INDEX_SUBSCRIBER):
        engine.ack(name, engine.max_offset if offset is None else offset)


def test_nothing_goes_before_both_builders_have_it(engine):
    _age_segments(engine, 100 * HOUR)
    r = _retention(engine)
    assert r.run_once() == [] and "builders" in r.stats.waiting_for
    _acked(engine, offset=SEGMENT + 10)  # the first segment only is durable in both
    assert r.run_once() == ["00000000000000000000"]
    assert engine.min_offset == SEGMENT


def test_expired_segments_go_oldest_first_never_the_one_being_written(engine):
    n = len(engine.segments.segments)
    _acked(engine)
    _age_segments(engine, 100 * HOUR)
    deleted = _retention(engine).run_once()
    assert len(deleted) == n - 1 and len(engine.segments.segments) == 1
    head = engine.segments.segments[0]
    assert head.start <= engine.max_offset - 1 < head.end  # the segment being written stays
    assert not any((engine.layout.commitlog_dir / name).exists() for name in deleted)


def test_unexpired_segments_stay_unless_the_disk_is_past_the_forced_ratio(engine):
    _acked(engine)
    _age_segments(engine, 10 * HOUR)  # younger than 72 h
    assert _retention(engine, ratio=0.80).run_once() == []  # above 75 %: only expired ones
    ratios = iter([0.90, 0.88, 0.84])  # one deletion brings it under 85 %... then 84 %
    r = Retention(engine, clock=_retention(engine).clock, disk_ratio=lambda: next(ratios))
    assert len(r.run_once()) == 2


def test_outside_the_deletion_hour_only_disk_pressure_deletes(engine):
    _acked(engine)
    _age_segments(engine, 100 * HOUR)
    assert _retention(engine, hour=5).run_once() == []
    assert len(_retention(engine, hour=5, ratio=0.76).run_once()) >= 1


def test_a_read_of_a_deleted_segment_gets_a_clear_answer(engine):
    _acked(engine)
    _age_segments(engine, 100 * HOUR)
    first = engine.segments.segments[0]
    r = _retention(engine)
    r.run_once()
    with pytest.raises(OffsetOutOfRangeError, match="minimum offset"):
        engine.read([first.start])
    r.run_once()  # closes the mappings of the segments deleted a pass ago
    assert not engine.segments.retired


def test_a_snapshot_older_than_the_first_segment_left_still_counts_idle_queues(tmp_path):
    """Retention deleted the segment the queue snapshot points into, then the writer died:
    a queue with no record left keeps its next queue offset (from the snapshot)."""
    cfg = WriterConfig(store=tmp_path, segment_size=SEGMENT, snapshot_interval_ms=3_600_000)
    e = CommitLogEngine(cfg)
    e.put([common_pb2.Message(topic="Idle", body=b"x") for _ in range(3)])
    e.close()  # the snapshot: offset in the first segment, Idle/0 -> 3
    e = CommitLogEngine(cfg)
    for i in range(40):
        e.put([common_pb2.Message(topic="Busy", body=bytes(6000), keys=f"k{i}")])
    _acked(e)
    _age_segments(e, 100 * HOUR)
    assert "00000000000000000000" in _retention(e).run_once()
    e.flusher.stop()  # then it dies: no snapshot, no clean close
    e.segments.close()
    e._store_lock.release()
    e = CommitLogEngine(cfg)
    try:
        assert not e.last_exit_clean and e.min_offset > 0
        (r,) = e.put([common_pb2.Message(topic="Idle", body=b"y")])
        assert r.queue_offset == 3
        (b,) = e.put([common_pb2.Message(topic="Busy", body=b"z")])
        assert b.queue_offset == 40
    finally:
        e.close()
