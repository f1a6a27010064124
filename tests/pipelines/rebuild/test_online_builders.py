"""The rebuild writes exactly what the online builders (``services/indexer``) write for the
same commitlog and settings: every consume-queue and index file, byte for byte, names too, and
the list of indexed topics (``rmqstore/index.topics``)."""

from pathlib import Path

import pytest

from pipelines.rebuild.consume_queue_sink import PRE_BLANK
from pipelines.rebuild.job import RebuildSettings, rebuild
from pipelines.synthetic import mixed_messages, write_commitlog
from rmqstore import delay, dispatch
from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog_segment, consume_queue
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name
from services.indexer import batch as batch_mod
from services.indexer import consume_queue_builder as cq_builder
from services.indexer import index_builder as ix_builder
from tests.pipelines.oracle import read_tree

pytestmark = pytest.mark.spark



def online_build(commitlog_dir: Path, root: Path, settings: RebuildSettings,
                 batch: int) -> dict[str, bytes]:
    """Feed every record, in commitlog order and in batches, to both online builders."""
    records = []
    for p in sorted(commitlog_dir.iterdir(), key=lambda p: p.name):
        base = parse_segment_name(p.name)
        if base is None:
            continue
        for _, rec in commitlog_segment.iter_segment(p.read_bytes(), base_offset=base):
            records.append(dispatch.from_record(rec))
    layout = StoreLayout.of(root)
    cqb = cq_builder.ConsumeQueueBuilder(layout, settings.cq_entries_per_file)
    ixb = ix_builder.IndexBuilder(layout, settings.index_slots, settings.index_entries)
    for i in range(0, len(records), batch):
        cols = batch_mod.Columns.from_records(records[i:i + batch])
        cqb.apply(cols)
        ixb.apply(cols)
    cqb.close()
    ixb.close()
    return read_tree(root)


def _assert_same(ours: dict[str, bytes], theirs: dict[str, bytes]) -> None:
    assert sorted(ours) == sorted(theirs)
    for path, data in theirs.items():
        assert ours[path] == data, path


def _topics(root: Path) -> bytes:
    return StoreLayout.of(root).index_topics.read_bytes()


@pytest.mark.golden
def test_golden_commitlog(spark, golden_store, golden_expected, tmp_path: Path):
    c = golden_expected["config"]
    settings = RebuildSettings(index_slots=c["maxHashSlotNum"], index_entries=c["maxIndexNum"],
                               cq_entries_per_file=c["consumeQueueEntriesPerFile"])
    rebuild(spark, golden_store, tmp_path / "out", settings)
    theirs = online_build(golden_store / "commitlog", tmp_path / "online", settings, batch=37)
    _assert_same(read_tree(tmp_path / "out"), theirs)
    assert _topics(tmp_path / "out") == _topics(tmp_path / "online")


@pytest.mark.parametrize("drop_first_segment", [False, True],
                         ids=["whole", "first-segment-deleted"])
def test_synthetic_multi_segment_commitlog(spark, tmp_path: Path, drop_first_segment: bool):
    """Several topics and queues, colliding keys, many index files; with the first segment
    deleted (as expiry does) queues start past unit 0 and get RocketMQ's pre-blank units."""
    store = tmp_path / "store"
    write_commitlog(store, mixed_messages(2000, body_size=90), segment_size=48 * 1024)
    if drop_first_segment:
        (store / "commitlog" / "00000000000000000000").unlink()
    settings = RebuildSettings(index_slots=50, index_entries=300, cq_entries_per_file=20,
                               split_bytes=30_000)
    report = rebuild(spark, store, tmp_path / "out", settings)
    assert len(report.index_files) >= 10 and report.segments >= 4
    theirs = online_build(store / "commitlog", tmp_path / "online", settings, batch=256)
    ours = read_tree(tmp_path / "out")
    _assert_same(ours, theirs)
    assert _topics(tmp_path / "out") == _topics(tmp_path / "online")
    assert len(_topics(tmp_path / "out").split()) > 1
    pre_blank = consume_queue.encode(PRE_BLANK)
    assert any(d.startswith(pre_blank) for p, d in ours.items()
               if p.startswith("consumequeue/")) == drop_first_segment


def test_a_store_written_with_other_delay_levels(spark, tmp_path: Path):
    """Schedule units' tags code is the store time plus their level's delay: a rebuild given
    the writer's --delay-levels writes what the builders wrote, RocketMQ's table would not."""
    store = tmp_path / "store"
    write_commitlog(store, mixed_messages(300, body_size=40), segment_size=1 << 20)
    levels = "2s 4s 8s 16s"
    settings = RebuildSettings(index_slots=50, index_entries=400, delay_levels=levels)
    rebuild(spark, store, tmp_path / "out", settings)
    with delay.levels_in_use(levels):
        theirs = online_build(store / "commitlog", tmp_path / "online", settings, batch=64)
    _assert_same(read_tree(tmp_path / "out"), theirs)
    rebuild(spark, store, tmp_path / "default", RebuildSettings(index_slots=50,
                                                                 index_entries=400))
    schedule = [p for p in theirs if p.startswith("consumequeue/SCHEDULE_TOPIC_XXXX/")]
    assert schedule and all(read_tree(tmp_path / "default")[p] != theirs[p] for p in schedule)
    with pytest.raises(InvalidArgumentError, match="must grow strictly"):
        RebuildSettings(delay_levels="5s 1s")
