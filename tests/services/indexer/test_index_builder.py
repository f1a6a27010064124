"""The index builder in-process, against the golden RocketMQ store."""

import pytest

from rmqstore.dispatch import index_keys
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import index_file as ixf
from rmqstore.formats.javahash import index_hash
from rmqstore.layout import StoreLayout, index_file_name
from services.indexer import progress
from services.indexer.batch import Columns
from services.indexer.index_builder import IndexBuilder
from services.indexer.progress import ProgressFileError
from tests.services.indexer.helpers import (
    GOLDEN_ENTRIES,
    GOLDEN_SLOTS,
    all_entries,
    assert_same_index,
    feed,
    index_files,
    open_index,
    query_offset,
    tree_bytes,
)

pytestmark = pytest.mark.golden


def new(root) -> IndexBuilder:
    return IndexBuilder(StoreLayout.of(root), GOLDEN_SLOTS, GOLDEN_ENTRIES)


def build(root, records, batch=50) -> IndexBuilder:
    b = new(root)
    feed(b, records, batch)
    b.close()
    return b


@pytest.mark.parametrize("batch", [1, 13, 500])
def test_files_equal_golden_entry_by_entry(tmp_path, golden_store, golden_records, batch):
    b = build(tmp_path, golden_records, batch)
    assert_same_index(tmp_path / "index", golden_store / "index")
    assert b.entries == sum(len(index_keys(r)) for r in golden_records)
    # names come from the data: the first entry's store time, in UTC
    first_times = []
    for path in index_files(tmp_path / "index"):
        f = open_index(path)
        first_times.append(f.header.begin_timestamp)
    assert [p.name for p in index_files(tmp_path / "index")] == [
        index_file_name(t) for t in first_times
    ]


def test_golden_queries_return_rocketmq_offsets(tmp_path, golden_records, golden_expected):
    build(tmp_path, golden_records)
    assert len(golden_expected["queries"]) == 40
    for q in golden_expected["queries"]:
        got = query_offset(tmp_path / "index", q["topic"], q["key"], q["maxNum"], q["begin"],
                           q["end"])
        assert got == q["expected"]["queryOffset"], (q["id"], q["note"])


def test_rolled_file_first_entry_uses_its_own_time(tmp_path, golden_records):
    """RocketMQ Q2 fixed: the first entry of a rolled file reads back as its own second."""
    records = golden_records[:60]
    by_phy = {r.phy_offset: r for r in records}
    b = IndexBuilder(StoreLayout.of(tmp_path), 7, 20)
    feed(b, records, 10)
    b.close()
    files = index_files(tmp_path / "index")
    assert len(files) > 3
    for path in files:
        f = open_index(path, 7, 20)
        _h, phy, diff, _prev = f.entry(1)
        assert diff == 0
        assert f.header.begin_timestamp == by_phy[phy].store_timestamp
    walked = []
    for path in files:
        f = open_index(path, 7, 20)
        for n in range(1, f.header.index_count):
            walked.append(f.entry(n)[1])
    assert walked == [r.phy_offset for r in records for _ in index_keys(r)]


def test_replay_adds_nothing(tmp_path, golden_records):
    build(tmp_path, golden_records)
    before = tree_bytes(tmp_path / "index")
    b = new(tmp_path)
    assert feed(b, golden_records, 21) == 0
    assert feed(b, golden_records[30:90], 7) == 0
    b.close()
    assert tree_bytes(tmp_path / "index") == before


def crash_after(root, records, durable_at, crash_at, batch=20):
    """Apply records[:durable_at] and flush, apply up to crash_at and vanish."""
    b = new(root)
    feed(b, records[:durable_at], batch)
    durable = b.flush()
    feed(b, records[durable_at:crash_at], batch)
    names = {p.name for p in index_files(root / "index")}
    del b  # no flush, no progress: what kill -9 leaves (the maps' pages stay in the page cache)
    return durable, names


@pytest.mark.parametrize("durable_at,crash_at", [(40, 90), (120, 200), (0, 150), (70, 70)])
def test_restart_repairs_and_replay_restores_the_clean_build(tmp_path, golden_records,
                                                              durable_at, crash_at):
    build(tmp_path / "clean", golden_records)
    root = tmp_path / "crashed"
    durable, names_at_crash = crash_after(root, golden_records, durable_at, crash_at)
    b = new(root)
    assert b.durable_offset == b.built_offset == durable
    if crash_at > durable_at:
        assert b.repaired_entries + b.emptied_files > 0
    # no file was deleted
    assert names_at_crash <= {p.name for p in index_files(root / "index")}
    # nothing at or past the durable offset is left
    for path in index_files(root / "index"):
        f = open_index(path)
        for n in range(1, max(f.header.index_count, 1)):
            assert f.entry(n)[1] < durable
    feed(b, [r for r in golden_records if r.phy_offset >= durable], 20)
    b.close()
    assert tree_bytes(root / "index") == tree_bytes(tmp_path / "clean" / "index")


def test_torn_tail_after_power_loss_is_rebuilt_from_the_kept_entries(tmp_path, golden_records):
    root = tmp_path / "a"
    b = new(root)
    feed(b, golden_records[:50], 10)
    b.flush()
    path = b.current.path
    b.close()
    good = path.read_bytes()
    hdr = open_index(path).header
    # the disk kept some pages written after the flush but not others: a header counting
    # entries that are zeros, and slots pointing at them
    torn = bytearray(good)
    ixf.HEADER.pack_into(torn, 0, *hdr._replace(index_count=hdr.index_count + 30))
    for s in range(0, GOLDEN_SLOTS, 3):
        ixf.SLOT.pack_into(torn, ixf.HEADER_SIZE + 4 * s, hdr.index_count + 5)
    path.write_bytes(bytes(torn))
    b = new(root)
    assert path.read_bytes() == good
    feed(b, golden_records[50:], 10)
    b.close()
    build(tmp_path / "clean", golden_records)
    assert tree_bytes(root / "index") == tree_bytes(tmp_path / "clean" / "index")


def test_truncate_drops_entries_past_the_cut_and_keeps_files(tmp_path, golden_records):
    cut = golden_records[150].phy_offset
    root = tmp_path / "a"
    b = new(root)
    feed(b, golden_records, 25)
    b.flush()
    names = {p.name for p in index_files(root / "index")}
    b.truncate(cut)
    assert b.durable_offset == cut
    b.close()
    assert {p.name for p in index_files(root / "index")} == names  # emptied, not deleted
    build(tmp_path / "b", golden_records[:150])
    ours = [p for p in index_files(root / "index") if open_index(p).header.index_count > 1]
    theirs = index_files(tmp_path / "b" / "index")
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs, strict=True):
        fo, ft = open_index(o), open_index(t)
        assert all_entries(fo) == all_entries(ft)
        assert fo.header._replace(end_timestamp=0) == ft.header._replace(end_timestamp=0)
        # the end time is known to the second after a cut, and still covers the last entry
        assert 0 <= fo.header.end_timestamp - ft.header.end_timestamp < 1000
    # restart and replay: the same files as a clean build
    b = new(root)
    assert b.durable_offset == cut
    feed(b, golden_records[150:], 25)
    b.close()
    build(tmp_path / "c", golden_records)
    assert_same_index(root / "index", tmp_path / "c" / "index", first_time_may_differ=False)


def test_counters_and_bad_input(tmp_path, golden_records):
    with pytest.raises(InvalidArgumentError, match="at least 1 slot and 2 entries, got 100 and 1"):
        IndexBuilder(StoreLayout.of(tmp_path), 100, 1)
    b = new(tmp_path)
    batch = Columns.from_records(golden_records[:10])
    batch.phy_offset = batch.phy_offset[::-1].copy()
    with pytest.raises(InvalidArgumentError, match="not in commitlog order"):
        b.apply(batch)
    assert not index_files(tmp_path / "index")
    feed(b, golden_records[:100], 100)
    assert 0 < b.slot_occupancy <= 1
    assert b.mean_chain_length >= 1
    h = b.current.header
    assert h.hash_slot_count == len({index_hash(k) % GOLDEN_SLOTS for r in golden_records[:100]
                                     for k in index_keys(r)})
    b.close()
    # a progress record naming a file that is gone is refused, not silently rebuilt
    layout = StoreLayout.of(tmp_path)
    rec = progress.read(layout.progress("index"))
    rec.extra["file"] = "20000101000000000"
    progress.write(layout.progress("index"), rec)
    with pytest.raises(ProgressFileError, match="names index file 20000101000000000"):
        new(tmp_path)


def test_adopts_files_without_a_progress_record(tmp_path, golden_store, golden_records):
    """A store RocketMQ wrote: its files are kept and its records are not indexed again."""
    root = tmp_path / "store"
    (root / "index").mkdir(parents=True)
    for p in index_files(golden_store / "index"):
        (root / "index" / p.name).write_bytes(p.read_bytes())
    before = tree_bytes(root / "index")
    b = new(root)
    assert feed(b, golden_records, 40) == 0
    b.close()
    assert tree_bytes(root / "index") == before


def test_durable_files_are_known_by_the_record_not_by_name_order(tmp_path, golden_records):
    """Store times that go backwards across a roll give a new file an older name."""
    records = [r._replace(store_timestamp=r.store_timestamp - (10**7 if i >= 30 else 0))
               for i, r in enumerate(golden_records[:60])]
    root = tmp_path / "a"
    b = IndexBuilder(StoreLayout.of(root), 7, 20)
    feed(b, records[:45], 15)  # rolls into files named ~3 hours before the first one
    durable = b.flush()
    feed(b, records[45:], 15)
    order = list(b.file_names)
    del b  # crash
    assert sorted(order) != order
    b = IndexBuilder(StoreLayout.of(root), 7, 20)
    assert b.durable_offset == durable
    feed(b, [r for r in records if r.phy_offset >= durable], 15)
    b.close()
    IndexBuilder(StoreLayout.of(tmp_path / "clean"), 7, 20).close()
    clean = IndexBuilder(StoreLayout.of(tmp_path / "clean"), 7, 20)
    feed(clean, records, 15)
    clean.close()
    assert tree_bytes(root / "index") == tree_bytes(tmp_path / "clean" / "index")
