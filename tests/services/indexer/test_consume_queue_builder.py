"""The consume-queue builder in-process, against the golden RocketMQ store."""

import numpy as np
import pytest

from rmqstore.dispatch import DispatchRecord, goes_to_consume_queue
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout
from services.indexer import progress
from services.indexer.batch import Columns
from services.indexer.consume_queue_builder import ConsumeQueueBuilder
from services.indexer.cq_files import PRE_BLANK
from services.indexer.mapped import FileSizeError
from tests.services.indexer.helpers import GOLDEN_CQ_ENTRIES, feed, tree_bytes

pytestmark = pytest.mark.golden


def build(root, records, batch=50, epf=GOLDEN_CQ_ENTRIES) -> ConsumeQueueBuilder:
    b = ConsumeQueueBuilder(StoreLayout.of(root), epf)
    feed(b, records, batch)
    b.close()
    return b


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_files_equal_golden_byte_for_byte(tmp_path, golden_store, golden_records, batch):
    b = build(tmp_path, golden_records, batch)
    ours = tree_bytes(tmp_path / "consumequeue")
    gold = tree_bytes(golden_store / "consumequeue")
    assert sorted(ours) == sorted(gold)
    for name, data in gold.items():
        assert ours[name] == data, name
    assert b.entries == sum(goes_to_consume_queue(r.sys_flag) for r in golden_records)
    assert b.entries < len(golden_records)  # the golden store has prepared/rollback records
    assert progress.read(StoreLayout.of(tmp_path).progress("consume-queue")).offset == (
        golden_records[-1].phy_offset + golden_records[-1].size
    )


def test_replay_is_a_no_op(tmp_path, golden_store, golden_records):
    build(tmp_path, golden_records)
    before = tree_bytes(tmp_path / "consumequeue")
    b = ConsumeQueueBuilder(StoreLayout.of(tmp_path), GOLDEN_CQ_ENTRIES)
    assert feed(b, golden_records, 33) == 0  # everything below the durable offset is there
    assert feed(b, golden_records[50:120], 9) == 0
    b.close()
    assert b.conflicts == 0
    assert tree_bytes(tmp_path / "consumequeue") == before


def test_restart_cuts_undurable_units_and_resumes(tmp_path, golden_store, golden_records):
    layout = StoreLayout.of(tmp_path)
    b = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
    feed(b, golden_records[:80], 16)
    durable = b.flush()
    feed(b, golden_records[80:150], 16)  # applied to the maps, never flushed or recorded
    del b  # a crash: the maps go away without flush or progress
    b2 = ConsumeQueueBuilder(layout, GOLDEN_CQ_ENTRIES)
    assert b2.built_offset == durable == golden_records[80].phy_offset
    for q in b2.queues.values():  # nothing at or past the durable offset survives
        assert q.last_offset < durable
    expected_ends: dict = {}
    for r in golden_records[:80]:
        if goes_to_consume_queue(r.sys_flag):
            expected_ends[(r.topic, r.queue_id)] = r.queue_offset + 1
    for key, q in b2.queues.items():
        assert q.end == expected_ends.get(key, 0), key
    resume = next(i for i, r in enumerate(golden_records) if r.phy_offset >= b2.built_offset)
    feed(b2, golden_records[resume:], 16)
    b2.close()
    assert tree_bytes(tmp_path / "consumequeue") == tree_bytes(golden_store / "consumequeue")


def test_truncate_equals_a_build_of_the_shorter_commitlog(tmp_path, golden_records):
    cut = golden_records[len(golden_records) // 2].phy_offset
    b = ConsumeQueueBuilder(StoreLayout.of(tmp_path / "a"), GOLDEN_CQ_ENTRIES)
    feed(b, golden_records, 40)
    b.flush()
    b.truncate(cut)
    assert b.durable_offset == b.built_offset == cut
    b.close()
    build(tmp_path / "b", [r for r in golden_records if r.phy_offset < cut])
    assert tree_bytes(tmp_path / "a" / "consumequeue") == tree_bytes(
        tmp_path / "b" / "consumequeue"
    )
    # a restart keeps the cut and replay rebuilds the rest
    b = ConsumeQueueBuilder(StoreLayout.of(tmp_path / "a"), GOLDEN_CQ_ENTRIES)
    assert b.durable_offset == cut
    feed(b, [r for r in golden_records if r.phy_offset >= cut], 40)
    b.close()
    build(tmp_path / "c", golden_records)
    assert tree_bytes(tmp_path / "a" / "consumequeue") == tree_bytes(
        tmp_path / "c" / "consumequeue"
    )


def _batch(topic, qid, queue_offsets, phys, sys_flag=0):
    n = len(queue_offsets)
    return Columns(
        topic=[topic] * n, queue_id=np.full(n, qid, dtype=np.int64),
        queue_offset=np.array(queue_offsets, dtype=np.int64),
        phy_offset=np.array(phys, dtype=np.int64), size=np.full(n, 100, dtype=np.int64),
        tags_code=np.arange(n, dtype=np.int64) - 1, store_timestamp=np.zeros(n, dtype=np.int64),
        keys=[""] * n, uniq_key=[""] * n, sys_flag=np.full(n, sys_flag, dtype=np.int64),
        next_offset=phys[-1] + 100,
    )


def test_queue_starting_past_zero_gets_rocketmq_pre_blank_units(tmp_path):
    layout = StoreLayout.of(tmp_path)
    b = ConsumeQueueBuilder(layout, 10)
    b.apply(_batch("T", 3, [15, 16], [1000, 1100]))
    b.close()
    qdir = layout.queue_dir("T", 3)
    assert [p.name for p in qdir.iterdir()] == ["00000000000000000200"]
    units = cq.units((qdir / "00000000000000000200").read_bytes())
    assert [tuple(u) for u in units[:5]] == [PRE_BLANK] * 5
    assert [tuple(u) for u in units[5:7]] == [(1000, 100, -1), (1100, 100, 0)]
    assert cq.valid_count(units.tobytes()) == 7
    b2 = ConsumeQueueBuilder(layout, 10)
    assert b2.max_offset_in_queue("T", 3) == 17
    b2.apply(_batch("T", 4, [20], [2000]))  # a new queue starting on a segment boundary
    b2.close()
    assert b2.conflicts == 0 and sum(q.gaps for q in b2.queues.values()) == 0
    assert [p.name for p in layout.queue_dir("T", 4).iterdir()] == ["00000000000000000400"]
    assert ConsumeQueueBuilder(layout, 10).max_offset_in_queue("T", 4) == 21


def test_units_span_segments_in_one_batch_and_skip_transactions(tmp_path):
    layout = StoreLayout.of(tmp_path)
    b = ConsumeQueueBuilder(layout, 4)
    b.apply(_batch("T", 0, list(range(10)), [i * 100 for i in range(10)]))
    prepared = _batch("T", 0, [0], [1000], sys_flag=0x4)
    rollback = _batch("T", 0, [0], [1100], sys_flag=0xC)
    assert b.apply(prepared) == 0 and b.apply(rollback) == 0
    b.close()
    names = sorted(p.name for p in layout.queue_dir("T", 0).iterdir())
    assert names == ["00000000000000000000", "00000000000000000080", "00000000000000000160"]
    data = b"".join((layout.queue_dir("T", 0) / n).read_bytes() for n in names)
    assert [int(o) for o in cq.units(data)["offset"][:10]] == [i * 100 for i in range(10)]
    assert cq.valid_count(data) == 10


def test_a_different_unit_in_place_is_replaced_and_counted(tmp_path):
    b = ConsumeQueueBuilder(StoreLayout.of(tmp_path), 10)
    b.apply(_batch("T", 0, [0, 1], [0, 100]))
    b.apply(_batch("T", 0, [1], [500]))
    assert b.conflicts == 1
    b.close()
    qdir = StoreLayout.of(tmp_path).queue_dir("T", 0)
    units = cq.units((qdir / "00000000000000000000").read_bytes())
    assert int(units["offset"][1]) == 500


def test_bad_configuration_and_input_are_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="entries per file must be positive, got 0"):
        ConsumeQueueBuilder(StoreLayout.of(tmp_path), 0)
    b = ConsumeQueueBuilder(StoreLayout.of(tmp_path), 10)
    with pytest.raises(InvalidArgumentError, match="negative queue id"):
        b.apply(_batch("T", -1, [0], [0]))
    with pytest.raises(InvalidArgumentError, match="characters outside"):
        b.apply(_batch("bad/topic", 0, [0], [0]))
    assert not (tmp_path / "consumequeue").exists()
    b.apply(_batch("T", 0, [0], [0]))
    b.close()
    with pytest.raises(FileSizeError, match="holds 200 bytes, the configured layout needs 400"):
        ConsumeQueueBuilder(StoreLayout.of(tmp_path), 20).truncate(0)


def test_a_batch_with_gaps_and_repeats_equals_its_records_one_by_one(tmp_path):
    """Queue offsets that jump, repeat or go back inside one batch (replays after a cut,
    several topics interleaved) are written run by run exactly as record by record."""
    offsets = {("A", 0): [0, 1, 2, 5, 6, 2, 3, 9], ("A", 1): [4, 4, 5], ("B", 0): [1, 0, 1, 2]}
    records = [
        DispatchRecord(topic, qid, qo, 1000 * n + 10 * qid, 100 + n, n, 0, "", "", 0, 0)
        for n, ((topic, qid), qo) in enumerate(
            ((key, qo) for key, qos in offsets.items() for qo in qos)
        )
    ]
    records = records[::2] + records[1::2]  # the queues interleaved
    trees = []
    for name, batches in (("whole", [records]), ("single", [[r] for r in records])):
        b = ConsumeQueueBuilder(StoreLayout.of(tmp_path / name), 4)
        for batch in batches:
            b.apply(Columns.from_records(batch))
        b.close()
        trees.append((tree_bytes(tmp_path / name / "consumequeue"), b.entries, b.conflicts))
    assert trees[0] == trees[1]
    queue = StoreLayout.of(tmp_path / "whole").queue_dir("A", 0)
    data = b"".join(p.read_bytes() for p in sorted(queue.iterdir()))
    written = [i for i, u in enumerate(cq.units(data)) if u["size"] > 0]
    assert written == [0, 1, 2, 3, 5, 6, 9]  # 4, 7 and 8 never came
