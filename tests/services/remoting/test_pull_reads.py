"""What a 4.x pull finds from the store's files alone (``PullReads.scan``, and the records'
bytes): RocketMQ's statuses and offsets, tag codes, the batch limits in messages and bytes,
records retention deleted, a queue cut after recovery."""

from pathlib import Path

from rmqstore.formats import commitlog
from rmqstore.formats import consume_queue as cq
from rmqstore.formats.javahash import java_hash
from rmqstore.layout import StoreLayout
from rmqstore.segments import segment_name
from services.query.pull import TagFilter
from services.remoting.pull_reads import PullReads

PER_FILE = 8  # units per consume-queue segment
CL_SEGMENT = 1 << 18
ALL = TagFilter.parse("*")
FAR = 1 << 60  # a commitlog end far beyond: every record "on disk" (8 records / 64 KiB)


def _store(root: Path, tags: list[str], body: int = 100) -> list[tuple[int, int]]:
    """One commitlog segment and queue T/0 over it, a record per tag; their (offset, size)."""
    data, units = b"", []
    for i, t in enumerate(tags):
        raw = commitlog.encode(commitlog.Record(
            "T", 0, bytes(body), properties=f"TAGS\x01{t}\x02", queue_offset=i,
            physical_offset=len(data)))  # fmt: skip
        units.append((len(data), len(raw), java_hash(t)))
        data += raw
    layout = StoreLayout.of(root)
    layout.commitlog_dir.mkdir(parents=True, exist_ok=True)
    (layout.commitlog_dir / segment_name(0)).write_bytes(data + bytes(CL_SEGMENT - len(data)))
    qdir = layout.queue_dir("T", 0)
    qdir.mkdir(parents=True, exist_ok=True)
    for first in range(0, max(len(units), 1), PER_FILE):
        chunk = b"".join(cq.encode(cq.CqUnit(*u)) for u in units[first : first + PER_FILE])
        seg = chunk + bytes(PER_FILE * cq.UNIT_SIZE - len(chunk))
        (qdir / segment_name(first * cq.UNIT_SIZE)).write_bytes(seg)
    return [(o, s) for o, s, _ in units]


def _reads(root: Path) -> PullReads:
    return PullReads(root, writer=None)  # type: ignore[arg-type]  # scan never calls it


def test_statuses_and_offsets(tmp_path):
    reads = _reads(tmp_path)
    assert reads.scan("T", 0, 0, 32, ALL, FAR).status == "NO_MATCHED_LOGIC_QUEUE"
    _store(tmp_path, ["a", "b", "a"])
    found = reads.scan("T", 0, 0, 32, ALL, FAR)
    assert (found.next_offset, found.min_offset, found.max_offset, len(found.wanted)) == (
        3, 0, 3, 3)  # fmt: skip
    at_end = reads.scan("T", 0, 3, 32, ALL, FAR)
    assert (at_end.status, at_end.next_offset) == ("OFFSET_OVERFLOW_ONE", 3)
    beyond = reads.scan("T", 0, 9, 32, ALL, FAR)  # the minimum is 0: back to it, as 4.9.8
    assert (beyond.status, beyond.next_offset) == ("OFFSET_OVERFLOW_BADLY", 0)
    only_b = reads.scan("T", 0, 0, 32, TagFilter.parse("b || c"), FAR)
    assert only_b.wanted == [found.wanted[1]] and only_b.next_offset == 3
    none = reads.scan("T", 0, 2, 32, TagFilter.parse("b"), FAR)
    assert (none.status, none.next_offset, none.wanted) == ("NO_MATCHED_MESSAGE", 3, [])


def test_batch_limits_in_messages_and_bytes_and_one_segment(tmp_path):
    _store(tmp_path, ["a"] * 20, body=10_000)  # records of about 10 KB
    reads = _reads(tmp_path)
    asked = reads.scan("T", 0, 0, 2, ALL, 0)
    assert (len(asked.wanted), asked.next_offset) == (2, 2)
    on_disk = reads.scan("T", 0, 0, 32, ALL, FAR)  # 64 KiB: 6 records of ~10 KB
    assert len(on_disk.wanted) == 6 and on_disk.next_offset == 6
    in_memory = reads.scan("T", 0, 0, 32, ALL, 0)  # 256 KiB, but the scan ends at segment's end
    assert len(in_memory.wanted) == PER_FILE and in_memory.next_offset == PER_FILE


def test_records_retention_deleted_and_a_queue_cut(tmp_path):
    where = _store(tmp_path, ["a"] * 12)
    reads = _reads(tmp_path)
    assert [r for r in reads.files.records(where) if r is None] == []
    # retention: the commitlog now starts above the first five records (a new segment there)
    layout = StoreLayout.of(tmp_path)
    cl_min = where[5][0]
    old = (layout.commitlog_dir / segment_name(0)).read_bytes()
    (layout.commitlog_dir / segment_name(0)).unlink()
    (layout.commitlog_dir / segment_name(cl_min)).write_bytes(old[cl_min:])
    low = reads.scan("T", 0, 2, 32, ALL, FAR)
    assert (low.status, low.next_offset, low.min_offset) == ("OFFSET_TOO_SMALL", 5, 5)
    assert reads.files.records(where[:1]) == [None]  # its bytes are gone
    # the consume queue's first segment removed by its builder: its minimum moves on
    (layout.queue_dir("T", 0) / segment_name(0)).unlink()
    assert reads.scan("T", 0, 8, 32, ALL, FAR).min_offset == 8
    # the queue cut after recovery (units past 10 zeroed): a consumer beyond goes to its end
    seg = layout.queue_dir("T", 0) / segment_name(PER_FILE * cq.UNIT_SIZE)
    units = seg.read_bytes()
    seg.write_bytes(units[: 2 * cq.UNIT_SIZE] + bytes(len(units) - 2 * cq.UNIT_SIZE))
    cut = reads.scan("T", 0, 12, 32, ALL, FAR)
    assert (cut.status, cut.next_offset, cut.max_offset) == ("OFFSET_OVERFLOW_BADLY", 10, 10)


def test_every_unit_taken_at_once_as_one_by_one(tmp_path):
    """Without a tag filter the batch comes from the units' offsets and sizes at once; with
    a filter every unit matches, unit by unit: the same batch, limits and next offset."""
    _store(tmp_path, ["a"] * 20, body=12_000)  # 64 KiB "on disk": 5 records
    reads = _reads(tmp_path)
    for offset, count, cl_max in ((1, 32, FAR), (1, 3, FAR), (3, 32, 0), (9, 32, 0), (2, 1, 0)):
        every = reads.scan("T", 0, offset, count, ALL, cl_max)
        each = reads.scan("T", 0, offset, count, TagFilter.parse("a"), cl_max)
        assert every.columns is not None and each.columns is None
        assert (every.wanted, every.next_offset) == (each.wanted, each.next_offset)
        assert every.wanted and len(every.wanted) <= count
    assert len(reads.scan("T", 0, 1, 32, ALL, FAR).wanted) == 5
