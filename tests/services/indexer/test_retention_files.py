"""Builders delete their files wholly below the commitlog's new minimum offset (retention),
and start again afterwards from what is left."""

import shutil

from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout
from services.indexer.consume_queue_builder import ConsumeQueueBuilder
from services.indexer.index_builder import IndexBuilder
from services.indexer.subscriber import Subscriber
from tests import procs
from tests.services.indexer.helpers import (
    GOLDEN_CQ_ENTRIES,
    GOLDEN_ENTRIES,
    GOLDEN_SLOTS,
    dispatch_records,
    feed,
    index_files,
)

LOW = 65536  # the golden commitlog's second segment: its first is deleted


def _queue_files(store):
    out = {}
    for qdir in sorted((store / "consumequeue").glob("*/*")):
        out[qdir] = sorted(p for p in qdir.iterdir())
    return out


def test_consume_queue_files_below_the_minimum_go_and_the_queues_reopen(tmp_path, golden_store):
    records = dispatch_records(golden_store)
    layout = StoreLayout.of(tmp_path)
    b = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
    feed(b, records, 64)
    b.flush()
    before = _queue_files(tmp_path)
    ends = {k: q.end for k, q in b.queues.items()}
    deleted = b.delete_below(LOW)
    b.close()
    after = _queue_files(tmp_path)
    assert deleted == sum(len(v) for v in before.values()) - sum(len(v) for v in after.values())
    assert deleted > 0
    for qdir, files in after.items():
        assert files, f"{qdir}: a queue's last file is never deleted"
        for p in files[:-1]:  # every file left but the last points at or past the minimum
            last = cq.units(p.read_bytes())[-1]
            assert int(last["offset"]) >= LOW
        assert files == before[qdir][len(before[qdir]) - len(files):]  # the oldest went
    again = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
    assert {k: q.end for k, q in again.queues.items()} == ends
    again.close()


def _indexed(tmp_path, golden_store) -> tuple[StoreLayout, IndexBuilder, list]:
    """An index builder that has indexed every golden record (two files)."""
    records = dispatch_records(golden_store)
    layout = StoreLayout.of(tmp_path)
    b = IndexBuilder(layout, GOLDEN_SLOTS, GOLDEN_ENTRIES)
    feed(b, records, 64)
    b.flush()
    return layout, b, records


def test_index_files_below_the_minimum_go_never_the_newest(tmp_path, golden_store):
    layout, b, records = _indexed(tmp_path, golden_store)
    first, newest = index_files(layout.index_dir)
    assert b.delete_below(10**9) == 1  # everything is below: the newest stays all the same
    assert index_files(layout.index_dir) == [newest] and not first.exists()
    b.close()  # progress now lists only the newest; a record from before lists both
    reopened = IndexBuilder(layout, GOLDEN_SLOTS, GOLDEN_ENTRIES)
    assert reopened.file_names == [newest.name]
    assert reopened.durable_offset == records[-1].phy_offset + records[-1].size
    reopened.close()


def test_an_index_progress_record_naming_deleted_files_still_opens(tmp_path, golden_store):
    layout, b, _records = _indexed(tmp_path, golden_store)
    b.close()  # its progress lists both files
    first, newest = index_files(layout.index_dir)
    first.unlink()  # deleted by retention before the progress was written again
    reopened = IndexBuilder(layout, GOLDEN_SLOTS, GOLDEN_ENTRIES)
    assert reopened.file_names == [newest.name]
    reopened.close()


def test_a_builder_follows_only_its_own_stores_writer(tmp_path, golden_store):
    """A writer of another store (at the builder's address after a swap) never makes the
    builder delete files, whatever its minimum offset; its own store's writer does."""
    other = tmp_path / "other"
    shutil.copytree(golden_store / "commitlog", other / "commitlog")
    for p in [other, *other.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (other / "commitlog" / f"{0:020d}").unlink()  # retention took its first segment
    writer = procs.start("services.commitlog", "--store", str(other), "--listen",
                         "127.0.0.1:0", "--commitlog-segment-size", "65536", "--no-delivery")
    try:
        layout = StoreLayout.of(tmp_path / "mine")
        b = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
        feed(b, dispatch_records(golden_store), 64)
        b.flush()
        before = _queue_files(layout.root)
        sub = Subscriber(b, writer.address)
        sub.connected = True  # as right after a session with its own writer
        assert sub.follow_retention() == 0 and _queue_files(layout.root) == before
        layout.own_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(other / "rmqstore" / "store-id", layout.store_id)  # now its own writer
        assert sub.follow_retention() > 0 and sub.writer_min_offset == LOW
        b.close()
    finally:
        writer.stop()
