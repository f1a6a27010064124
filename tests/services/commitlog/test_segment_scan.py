"""Recovery's segment walks, in this process or in forked workers."""

import logging
import os

import pytest

from rmqstore.formats import commitlog as cl
from services.commitlog import segment_scan
from services.commitlog.segment_scan import Part, run_parts
from tests.rmqstore.formats.test_commitlog import tv4_record


def _pid(part: Part) -> tuple[str, int]:
    return part.path, os.getpid()


def _parts(n: int, size: int = 10) -> list[Part]:
    return [Part(f"seg{i}", i * size, 0, size) for i in range(n)]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to read in parallel")
def test_enough_to_read_goes_to_worker_processes_in_order():
    parts = _parts(3)
    out = run_parts(parts, _pid, _pid, parallel_bytes=30)
    assert [path for path, _ in out] == ["seg0", "seg1", "seg2"]
    assert os.getpid() not in {pid for _, pid in out}


def test_little_to_read_or_one_part_stays_here():
    assert {pid for _, pid in run_parts(_parts(3), _pid, _pid, parallel_bytes=31)} == {
        os.getpid()
    }
    assert run_parts(_parts(1), _pid, _pid, parallel_bytes=0) == [("seg0", os.getpid())]


def test_workers_that_cannot_start_fall_back_to_this_process(monkeypatch, caplog):
    class NoFork:
        def __init__(self, *args, **kwargs):
            raise OSError("fork refused")

    monkeypatch.setattr(segment_scan, "ProcessPoolExecutor", NoFork)
    with caplog.at_level(logging.WARNING):
        out = run_parts(_parts(2), _pid, _pid, parallel_bytes=0)
    assert out == [("seg0", os.getpid()), ("seg1", os.getpid())]
    assert "fork refused" in caplog.text


def test_heads_count_queue_offsets_up_to_a_record_too_short_for_its_own_fields():
    r = tv4_record()
    good = []
    for i in range(3):
        r.queue_offset, r.physical_offset = 7 + i, sum(map(len, good))
        good.append(cl.encode(r))
    rec = good[0]
    short = 60  # ends before the body length
    bad = cl.HEAD.pack(short, cl.MAGIC_V1, *cl.HEAD.unpack_from(rec)[2:]) + rec[cl.HEAD_SIZE:short]
    data = b"".join(good) + bad + rec
    got = segment_scan.heads(data, Part("seg", 0, 0, len(data)))
    assert got.next_offsets == {(r.topic, r.queue_id): 10}
    assert got.last_position == len(good[0]) * 2
    assert got.error is not None and "does not fit" in got.error
    clean = segment_scan.heads(data, Part("seg", 0, 0, len(b"".join(good))))  # limit: before it
    assert (clean.next_offsets, clean.error) == (got.next_offsets, None)
