"""Shared test helpers: golden dispatch records, feeding builders, reading their files back."""

from collections.abc import Sequence
from pathlib import Path

from rmqstore.dispatch import DispatchRecord, from_record
from rmqstore.formats import commitlog_segment
from rmqstore.formats import index_file as ixf
from rmqstore.layout import is_index_file_name
from rmqstore.segments import parse_segment_name
from services.indexer.batch import Columns

GOLDEN_SLOTS = 100
GOLDEN_ENTRIES = 400
GOLDEN_CQ_ENTRIES = 10
MAX_MSGS_NUM_BATCH = 64


def dispatch_records(store: Path) -> list[DispatchRecord]:
    """Every record of a store's commitlog as the writer would dispatch it, in order."""
    out = []
    for p in sorted((store / "commitlog").iterdir()):
        base = parse_segment_name(p.name)
        assert base is not None
        for _pos, rec in commitlog_segment.iter_segment(p.read_bytes(), base_offset=base):
            out.append(from_record(rec))
    return out


def feed(builder, records: Sequence[DispatchRecord], batch: int) -> int:
    """Apply records in batches of ``batch``; return the new entries reported."""
    new = 0
    for i in range(0, len(records), batch):
        new += builder.apply(Columns.from_records(records[i : i + batch]))
    return new


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``root``."""
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def index_files(index_dir: Path) -> list[Path]:
    if not index_dir.is_dir():
        return []
    return sorted(p for p in index_dir.iterdir() if is_index_file_name(p.name))


def open_index(path: Path, slots: int = GOLDEN_SLOTS,
               entries: int = GOLDEN_ENTRIES) -> ixf.IndexFile:
    return ixf.IndexFile(path.read_bytes(), slots, entries)


def all_entries(f: ixf.IndexFile) -> list[tuple[int, int, int, int]]:
    return [f.entry(n) for n in range(f.entries)]


def query_offset(index_dir: Path, topic: str, key: str, max_num: int, begin: int, end: int,
                 slots: int = GOLDEN_SLOTS, entries: int = GOLDEN_ENTRIES) -> list[int]:
    """``IndexService.queryOffset`` (spec §6.6): newest file first, chains newest first."""
    max_num = min(max_num, MAX_MSGS_NUM_BATCH)
    result: list[int] = []
    for path in reversed(index_files(index_dir)):
        f = open_index(path, slots, entries)
        if f.header.index_count <= 1:
            continue
        if f.is_time_matched(begin, end):
            result.extend(f.select_phy_offsets(f"{topic}#{key}", max_num - len(result),
                                               begin, end))
        if f.header.begin_timestamp < begin or len(result) >= max_num:
            break
    return result


def assert_same_index(ours_dir, gold_dir, first_time_may_differ=True):
    """Equal entry by entry, names aside (and the rolled file's first entry time, RocketMQ Q2)."""
    ours, gold = index_files(ours_dir), index_files(gold_dir)
    assert len(ours) == len(gold)
    for n, (o, g) in enumerate(zip(ours, gold, strict=True)):
        fo, fg = open_index(o), open_index(g)
        assert fo.header == fg.header, o.name
        assert o.read_bytes()[ixf.HEADER_SIZE : ixf.HEADER_SIZE + 4 * GOLDEN_SLOTS] == (
            g.read_bytes()[ixf.HEADER_SIZE : ixf.HEADER_SIZE + 4 * GOLDEN_SLOTS]
        )
        eo, eg = all_entries(fo), all_entries(fg)
        if n > 0 and first_time_may_differ:  # Q2: only the diff of entry 1 may differ
            assert eo[1][:2] == eg[1][:2] and eo[1][3] == eg[1][3]
            eo, eg = eo[:1] + eo[2:], eg[:1] + eg[2:]
        assert eo == eg, o.name
