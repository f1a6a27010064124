"""Pull by queue offset: RocketMQ 4.9 statuses, next/min/max offsets, tag filtering."""

import random
from pathlib import Path

import pytest

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import consume_queue as cq
from rmqstore.formats.javahash import java_hash
from services.query.pull import Puller, PullStatus
from services.query.queue_reader import QueueCatalog
from tests.aio import run
from tests.services.query.segment_source import SegmentRecordSource
from tests.services.query.store_builder import build_store, copy_store, random_messages

GOLDEN_CQ_UNITS_PER_FILE = 10


def _golden_puller(store: Path, source, memory_bytes: int | None = None) -> Puller:
    return Puller(QueueCatalog(store / "consumequeue"), source, memory_bytes)


def _tags_by_phy(golden_expected: dict) -> dict[int, str]:
    return {m["stored"]["phyOffset"]: m["stored"]["properties"].get("TAGS", "")
            for m in golden_expected["messages"]}


@pytest.mark.golden
@pytest.mark.parametrize("tags", ["*", "", "TagA||TagB", " TagC || 标签 ", "TagNeg10", "Nope"])
def test_pull_every_golden_queue_to_the_end(golden_store, golden_source, golden_expected, tags):
    puller = _golden_puller(golden_store, golden_source)
    tag_of = _tags_by_phy(golden_expected)

    def _passes(unit: dict, wanted: set[str] | None) -> bool:
        """Tags code first (an int32 compare; on the schedule topic it is a delivery time),
        then the record's real tag."""
        if wanted is None:
            return True
        code = unit["tagsCode"] & 0xFFFFFFFF
        code = code - (1 << 32) if code & 0x80000000 else code
        return code in {java_hash(t) for t in wanted} and tag_of[unit["phyOffset"]] in wanted

    wanted = None if tags.strip() in ("", "*") else {t.strip() for t in tags.split("||")}
    for name, units in golden_expected["consumeQueues"].items():
        topic, qid = name.split("/")
        bounds = golden_expected["consumeQueueMaxOffsets"][name]
        offset, got = 0, []
        while True:
            res = run(puller.pull(topic, int(qid), offset, 1000, tags))
            assert (res.min_offset, res.max_offset) == (bounds["min"], bounds["max"])
            if offset == bounds["max"]:
                assert res.status is PullStatus.OFFSET_OVERFLOW_ONE
                assert res.next_offset == offset
                break
            # the scan stops at the end of the consume-queue file holding the offset
            file_end = (offset // GOLDEN_CQ_UNITS_PER_FILE + 1) * GOLDEN_CQ_UNITS_PER_FILE
            assert res.next_offset == min(file_end, bounds["max"])
            expect_here = [
                u["phyOffset"] for u in units[offset : res.next_offset] if _passes(u, wanted)
            ]
            assert [r.physical_offset for r in res.records] == expect_here
            assert res.status is (
                PullStatus.FOUND if expect_here else PullStatus.NO_MATCHED_MESSAGE
            )
            for r in res.records:
                assert (r.topic, r.queue_id) == (topic, int(qid))
            got.extend(expect_here)
            offset = res.next_offset
        assert got == [u["phyOffset"] for u in units if _passes(u, wanted)]


@pytest.mark.golden
def test_pull_status_table(golden_store, golden_source, golden_expected, tmp_path):
    puller = _golden_puller(golden_store, golden_source)
    mx = golden_expected["consumeQueueMaxOffsets"]["TopicA/0"]["max"]
    res = run(puller.pull("TopicA", 0, 3, 2))
    assert (res.status, res.next_offset, len(res.records)) == (PullStatus.FOUND, 5, 2)
    res = run(puller.pull("TopicA", 0, mx))
    assert (res.status, res.next_offset) == (PullStatus.OFFSET_OVERFLOW_ONE, mx)
    res = run(puller.pull("TopicA", 0, mx + 5))
    assert (res.status, res.next_offset) == (PullStatus.OFFSET_OVERFLOW_BADLY, 0)  # min == 0
    res = run(puller.pull("TopicA", 7, 0))
    assert (res.status, res.next_offset) == (PullStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    res = run(puller.pull("NoSuchTopic", 0, 0))
    assert res.status is PullStatus.NO_MATCHED_LOGIC_QUEUE

    store = copy_store(golden_store, tmp_path / "store")
    (store / "consumequeue" / "TopicA" / "9").mkdir()
    qdir = store / "consumequeue" / "TopicA" / "1"
    (qdir / "00000000000000000200").unlink()  # units 10..19 gone
    units = (qdir / "00000000000000000000").read_bytes()
    blank = cq.encode(cq.CqUnit(0, 0x7FFFFFFF, 0))
    (qdir / "00000000000000000000").write_bytes(blank * 3 + units[3 * cq.UNIT_SIZE :])
    puller = _golden_puller(store, golden_source)
    res = run(puller.pull("TopicA", 9, 0))
    assert (res.status, res.next_offset) == (PullStatus.NO_MESSAGE_IN_QUEUE, 0)
    res = run(puller.pull("TopicA", 1, 1))
    assert (res.status, res.next_offset, res.min_offset) == (PullStatus.OFFSET_TOO_SMALL, 3, 3)
    res = run(puller.pull("TopicA", 1, 12))
    assert (res.status, res.next_offset) == (PullStatus.OFFSET_FOUND_NULL, 20)
    res = run(puller.pull("TopicA", 1, 3, 100))
    assert res.status is PullStatus.FOUND and res.next_offset == 10


def test_batch_limits_in_memory_and_on_disk(tmp_path):
    rng = random.Random(1)
    msgs = random_messages(rng, 120, ["T1"], ["k"])
    for m in msgs:
        m["queue_id"] = 0
        m["body"] = rng.randbytes(rng.choice((10, 9000, 20000)))
    store = build_store(tmp_path / "store", msgs, slots=11, entries=1000,
                        segment_size=8 * 1024 * 1024)
    source = SegmentRecordSource(store.root / "commitlog", store.segment_size)
    sizes = [cq.decode((store.root / "consumequeue/T1/0/00000000000000000000").read_bytes(),
                       i * cq.UNIT_SIZE).size for i in range(len(msgs))]

    def expected_count(start: int, max_msgs: int, max_bytes: int, max_count: int) -> int:
        n = total = 0
        for s in sizes[start:]:
            if n and (n >= max_msgs or total + s > max_bytes or n >= max_count):
                break
            n, total = n + 1, total + s
        return n

    for memory, (max_b, max_c) in ((None, (256 * 1024, 32)), (0, (64 * 1024, 8))):
        puller = Puller(QueueCatalog(store.root / "consumequeue"), source, memory)
        offset = 0
        while offset < len(msgs):
            res = run(puller.pull("T1", 0, offset, 100))
            n = expected_count(offset, 100, max_b, max_c)
            assert len(res.records) == n and res.next_offset == offset + n
            offset = res.next_offset
    res = run(Puller(QueueCatalog(store.root / "consumequeue"), source).pull("T1", 0, 0, 0))
    assert len(res.records) == expected_count(0, 32, 256 * 1024, 32)


@pytest.mark.golden
@pytest.mark.parametrize("args", [
    ("TopicA", 0, -1, 1), ("TopicA", -1, 0, 1), ("TopicA", 0, 0, -5), ("bad topic", 0, 0, 1),
    ("", 0, 0, 1), ("T" * 200, 0, 0, 1),
])
def test_pull_bad_input(golden_store, golden_source, args):
    with pytest.raises(InvalidArgumentError):
        run(_golden_puller(golden_store, golden_source).pull(*args))


@pytest.mark.golden
def test_huge_max_messages_is_bounded(golden_store, golden_source, golden_expected):
    res = run(_golden_puller(golden_store, golden_source).pull("TopicA", 0, 0, 2**31 - 1))
    assert res.status is PullStatus.FOUND
    assert len(res.records) == GOLDEN_CQ_UNITS_PER_FILE  # one consume-queue file at most
