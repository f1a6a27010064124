"""Rebuild synthetic multi-segment commitlogs and compare with a record-by-record build."""

from pathlib import Path

import pytest

from pipelines.rebuild.job import RebuildSettings, rebuild
from pipelines.synthetic import CommitlogWriter, Message, mixed_messages, write_commitlog
from rmqstore.formats import consume_queue
from rmqstore.formats.index_file import IndexFile
from tests.pipelines.forged import forged_store
from tests.pipelines.oracle import read_tree, sequential_build

pytestmark = pytest.mark.spark

SETTINGS = RebuildSettings(index_slots=64, index_entries=200, cq_entries_per_file=16,
                           split_bytes=20_000)


@pytest.mark.parametrize("step_ms", [7, 0], ids=["distinct-times", "same-time"])
def test_parallel_rebuild_equals_sequential_build(spark, tmp_path: Path, step_ms: int):
    store = tmp_path / "store"
    written = write_commitlog(store, mixed_messages(1500, body_size=120, step_ms=step_ms),
                              segment_size=64 * 1024)
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) >= 3
    report = rebuild(spark, store, tmp_path / "out", SETTINGS)
    assert report.ranges > report.segments  # segments were cut into ranges
    assert report.records == len(written)
    assert report.corruptions == [] and report.notes == []
    expected = sequential_build(store / "commitlog", SETTINGS.cq_entries_per_file,
                                SETTINGS.index_slots, SETTINGS.index_entries)
    ours = read_tree(tmp_path / "out")
    assert sorted(ours) == sorted(expected)
    for path, data in expected.items():
        assert ours[path] == data, path
    index_names = [p for p in expected if p.startswith("index/")]
    assert len(index_names) >= 10  # enough keys to roll many times
    assert len(report.index_files) == len(index_names)
    if step_ms == 0:  # every file starts at the same store time: names made unique by +1 ms
        assert len(set(report.index_files)) == len(report.index_files)
    # prepared and rollback records have no consume-queue unit; every other record has one
    in_cq = sum(1 for w in written if w.message.sys_flag & 0xC in (0, 0x8))
    assert report.cq_units == in_cq < len(written)


def test_colliding_keys_share_a_chain(spark, tmp_path: Path):
    """``Aa`` and ``BB`` hash alike: both are in the chain the rebuilt index walks."""
    store = tmp_path / "store"
    written = write_commitlog(store, mixed_messages(40, step_ms=1000), segment_size=64 * 1024)
    settings = RebuildSettings(index_slots=8, index_entries=400, cq_entries_per_file=16)
    rebuild(spark, store, tmp_path / "out", settings)
    [path] = (tmp_path / "out" / "index").iterdir()
    index = IndexFile(path.read_bytes(), settings.index_slots, settings.index_entries)
    expected = [w.phy_offset for w in written
                if w.message.topic == "Topic0" and "KEYS" in w.message.properties
                and w.message.sys_flag & 0xC != 0xC]
    got = index.select_phy_offsets("Topic0#Aa", 1000, 0, 2**62)
    assert sorted(got) == expected and got == sorted(got, reverse=True)


def test_a_cut_inside_a_record_is_cut_again_by_walking(spark, tmp_path: Path):
    """A body copying a record header that names its own place fools the planner's search;
    the rebuild sees that the range before it ran past the cut, and plans again."""
    store, written, fake = forged_store(tmp_path)
    settings = RebuildSettings(index_slots=64, index_entries=2000, cq_entries_per_file=16,
                               split_bytes=fake)
    report = rebuild(spark, store, tmp_path / "out", settings)
    assert report.records == len(written) and report.corruptions == []
    [note] = report.notes
    assert f"cut at position {fake} did not begin at a record" in note
    expected = sequential_build(store / "commitlog", settings.cq_entries_per_file,
                                settings.index_slots, settings.index_entries)
    assert read_tree(tmp_path / "out") == expected


def test_a_queue_whose_offsets_skip_a_whole_file(spark, tmp_path: Path):
    """Queue offsets 0-19, then 60-79 (a writer's queue table restored from an older
    snapshot, say): files are written where units are, none for offsets 32-47."""
    store = tmp_path / "store"
    w = CommitlogWriter(store, 64 * 1024)
    written = []
    for i in range(40):
        if i == 20:
            w.counters[("T", 0)] += 40
        written.append(w.append(Message("T", 0, b"body-%d" % i, {"KEYS": f"k{i}"})))
    w.close()
    settings = RebuildSettings(index_slots=64, index_entries=200, cq_entries_per_file=16)
    report = rebuild(spark, store, tmp_path / "out", settings)
    assert report.records == 40 and report.cq_units == 40
    qdir = tmp_path / "out" / "consumequeue" / "T" / "0"
    files = {int(p.name) // (16 * consume_queue.UNIT_SIZE): p.read_bytes()
             for p in qdir.iterdir()}
    assert sorted(files) == [0, 1, 3, 4]
    for w_ in written:
        f, slot = divmod(w_.queue_offset, 16)
        unit = consume_queue.decode(files[f], slot * consume_queue.UNIT_SIZE)
        assert (unit.commitlog_offset, unit.size) == (w_.phy_offset, w_.size)
