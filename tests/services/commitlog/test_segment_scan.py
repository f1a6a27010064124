"""Recovery's segment walks, in this process or in forked workers."""

import logging
import os

import pytest

from services.commitlog import segment_scan
from services.commitlog.segment_scan import Part, run_parts


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
