"""Corrupt and torn commitlogs: the data read stops at the last good record, and it says so."""

import os
from pathlib import Path

import pytest

from pipelines.rebuild.job import RebuildSettings, rebuild
from pipelines.synthetic import Message, mixed_messages, write_commitlog
from rmqstore.errors import InvalidArgumentError
from tests.pipelines.oracle import read_tree, sequential_build

pytestmark = pytest.mark.spark

SETTINGS = RebuildSettings(index_slots=32, index_entries=100, cq_entries_per_file=8,
                           split_bytes=16_000)


def _store(tmp_path: Path, count: int = 600):
    store = tmp_path / "store"
    written = write_commitlog(store, mixed_messages(count, body_size=80),
                              segment_size=32 * 1024)
    return store, written


def _flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


def _segment_of(store: Path, phy: int) -> tuple[Path, int]:
    segs = sorted((store / "commitlog").iterdir(), key=lambda p: int(p.name))
    seg = [p for p in segs if int(p.name) <= phy][-1]
    return seg, phy - int(seg.name)


def test_corrupt_body_in_the_last_segment_stops_there(spark, tmp_path: Path):
    store, written = _store(tmp_path)
    bad = written[-5]
    seg, pos = _segment_of(store, bad.phy_offset)
    _flip(seg, pos + 100)  # inside the body: the CRC no longer matches
    report = rebuild(spark, store, tmp_path / "out", SETTINGS)
    [c] = report.corruptions
    assert (c.file, c.position, c.offset) == (str(seg), pos, bad.phy_offset)
    assert "CRC" in c.reason
    assert report.records == len(written) - 5
    # the output is exactly what the good records give
    good = tmp_path / "good"
    os.makedirs(good / "commitlog")
    for p in (store / "commitlog").iterdir():
        data = p.read_bytes()
        if p == seg:
            data = data[:pos] + bytes(len(data) - pos)  # the tail cut as recovery cuts it
        (good / "commitlog" / p.name).write_bytes(data)
    expected = sequential_build(good / "commitlog", SETTINGS.cq_entries_per_file,
                                SETTINGS.index_slots, SETTINGS.index_entries)
    assert read_tree(tmp_path / "out") == expected


def test_torn_record_in_a_middle_segment_leaves_out_everything_after(spark, tmp_path: Path):
    store, written = _store(tmp_path)
    segs = sorted((store / "commitlog").iterdir(), key=lambda p: int(p.name))
    assert len(segs) >= 3
    middle = segs[1]
    in_middle = [w for w in written if int(middle.name) <= w.phy_offset < int(segs[2].name)]
    torn = in_middle[len(in_middle) // 2]
    pos = torn.phy_offset - int(middle.name)
    with open(middle, "r+b") as f:  # a torn write: the record's second half is zeros
        f.seek(pos + torn.size // 2)
        f.write(bytes(torn.size - torn.size // 2))
    report = rebuild(spark, store, tmp_path / "out", SETTINGS)
    [c] = report.corruptions
    assert (c.file, c.offset) == (str(middle), torn.phy_offset)
    assert report.records == written.index(torn)
    assert any(str(segs[2]) in n for n in report.notes)  # later segments: left out, said so
    units = sum(len(d) // 20 - d.count(bytes(20)) for p, d in read_tree(tmp_path / "out").items()
                if p.startswith("consumequeue/"))
    assert units == sum(1 for w in written[: written.index(torn)]
                        if w.message.sys_flag & 0xC in (0, 0x8))


def test_existing_output_is_refused_and_left_alone(spark, tmp_path: Path):
    store, _ = _store(tmp_path, 50)
    out = tmp_path / "out"
    (out / "index").mkdir(parents=True)
    (out / "index" / "keep").write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="already has index"):
        rebuild(spark, store, out, SETTINGS)
    assert sorted(p.name for p in out.rglob("*")) == ["index", "keep"]
    report = rebuild(spark, store, out, SETTINGS, replace=True)
    assert sorted(p.name for p in (out / "index").iterdir()) == report.index_files
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_failed_run_writes_nothing(spark, tmp_path: Path):
    """A topic that cannot be a directory name fails the job inside a task: no output."""
    store = tmp_path / "store"
    messages = list(mixed_messages(50))
    messages[30] = Message("bad/topic", 0, b"x", {}, 0, messages[30].store_timestamp)
    write_commitlog(store, messages, segment_size=32 * 1024)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="bad/topic"):  # noqa: B017 - Spark wraps the error
        rebuild(spark, store, out, SETTINGS)
    assert list(tmp_path.iterdir()) == [store]
