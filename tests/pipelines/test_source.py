"""Planning byte ranges of segments and deciding where the commitlog's data ends."""

from pathlib import Path

from pipelines.source import (
    ENDED_AT_BLANK,
    ENDED_AT_CORRUPT,
    ENDED_AT_LIMIT,
    ENDED_AT_ZEROS,
    RangeEnd,
    data_end,
    iter_range,
    iter_range_columns,
    list_segments,
    misaligned,
    plan_ranges,
    read_range_columns,
    valid_prefix,
)
from pipelines.synthetic import mixed_messages, write_commitlog
from tests.pipelines.forged import forged_store


def test_ranges_cut_at_record_boundaries_and_cover_every_record(tmp_path: Path):
    written = write_commitlog(tmp_path, mixed_messages(500), segment_size=32 * 1024)
    segments = list_segments(tmp_path / "commitlog")
    ranges = plan_ranges(segments, split_bytes=5_000)
    assert len(ranges) > 2 * len(segments)
    starts = {w.phy_offset for w in written}
    seen = []
    for r in ranges:
        assert r.segment.start_offset + r.begin in starts or r.begin == 0
        items = list(iter_range(r))
        end = items[-1]
        assert isinstance(end, RangeEnd)
        if r.end is not None:
            assert end.ended_by == ENDED_AT_LIMIT and end.position == r.end
        else:
            assert end.ended_by in (ENDED_AT_BLANK, ENDED_AT_ZEROS)
        seen.extend(rec.physical_offset for _, rec in items[:-1])
    assert seen == [w.phy_offset for w in written]
    assert [e.ended_by for e in (list(iter_range(r))[-1] for r in ranges if r.end is None)] \
        == [ENDED_AT_BLANK] * (len(segments) - 1) + [ENDED_AT_ZEROS]


def test_data_ends_at_the_first_corruption(tmp_path: Path):
    write_commitlog(tmp_path, mixed_messages(300), segment_size=16 * 1024)
    ranges = plan_ranges(list_segments(tmp_path / "commitlog"), split_bytes=4_000)
    ends = {r.number: list(iter_range(r))[-1] for r in ranges}
    every = {r.number: True for r in ranges}
    included, notes = valid_prefix(ranges, ends, every)
    assert included == set(every) and notes == []
    bad = ranges[len(ranges) // 2]
    ends[bad.number] = RangeEnd(bad.begin, ENDED_AT_CORRUPT, None)
    # corruption objects carry the details; valid_prefix only needs the flag and the order
    from pipelines.source import Corruption
    ends[bad.number] = RangeEnd(bad.begin, ENDED_AT_CORRUPT,
                                Corruption(bad.segment.path, bad.begin, 0, "test"))
    included, notes = valid_prefix(ranges, ends, every)
    assert included == set(range(bad.number + 1))
    assert len(notes) == len(ranges) - bad.number - 1


def test_cuts_found_near_split_points_are_the_walked_cuts(tmp_path: Path):
    write_commitlog(tmp_path, mixed_messages(2000), segment_size=64 * 1024)
    segments = list_segments(tmp_path / "commitlog")
    for split in (3_000, 10_000, 40_000):
        found = plan_ranges(segments, split)
        assert found == plan_ranges(segments, split, walk=True)
        ends = {r.number: list(iter_range(r))[-1] for r in found}
        assert misaligned(found, ends) == []


def test_a_cut_inside_a_record_is_caught_and_walking_cuts_right(tmp_path: Path):
    store, written, fake = forged_store(tmp_path)
    segments = list_segments(store / "commitlog")
    found = plan_ranges(segments, fake)
    assert found[1].begin == fake  # inside the carrier's body
    ends = {r.number: list(iter_range(r))[-1] for r in found}
    assert ends[0].ended_by == ENDED_AT_LIMIT and ends[0].position > fake
    assert misaligned(found, ends) == [found[1]]
    walked = plan_ranges(segments, fake, walk=True)
    ends = {r.number: list(iter_range(r))[-1] for r in walked}
    assert misaligned(walked, ends) == []
    seen = [rec.physical_offset for r in walked for _, rec in list(iter_range(r))[:-1]]
    assert seen == [w.phy_offset for w in written]


def test_ranges_after_a_blank_marker_in_their_segment_are_left_out(tmp_path: Path):
    write_commitlog(tmp_path, mixed_messages(300), segment_size=16 * 1024)
    ranges = plan_ranges(list_segments(tmp_path / "commitlog"), split_bytes=4_000)
    ends = {r.number: list(iter_range(r))[-1] for r in ranges}
    every = {r.number: True for r in ranges}
    early = next(r for r in ranges if r.begin == 0 and r.end is not None)
    later = [r.number for r in ranges if r.segment == early.segment and r.begin > early.begin]
    ends[early.number] = RangeEnd(ends[early.number].position, ENDED_AT_BLANK)
    included, notes = valid_prefix(ranges, ends, every)
    assert included == set(every) - set(later)  # the next segments still count
    assert len(notes) == len(later) and all("end marker" in n for n in notes)


def test_columns_a_few_records_at_a_time_are_the_records_and_end_of_iter_range(tmp_path: Path):
    write_commitlog(tmp_path, mixed_messages(300), segment_size=16 * 1024)
    segs = list_segments(tmp_path / "commitlog")
    with open(segs[1].path, "r+b") as f:  # a bad magic in the middle of segment 2
        f.seek(3_000 + 4)
        f.write(b"\0\0\0\1")
    ends = []
    for r in plan_ranges(segs, split_bytes=4_000, walk=True):
        *records, end = iter_range(r)
        ends.append(end.ended_by)
        for size in (1, 7, None):
            *chunks, chunk_end = iter_range_columns(r, max_records=size)
            assert chunk_end == end
            assert len(chunks) >= 1 and all(size is None or len(c) <= size for c, _ in chunks)
            offsets = [p for cols, _ in chunks for p in cols.physical_offset.tolist()]
            assert offsets == [rec.physical_offset for _, rec in records]
        cols, whole_end = read_range_columns(r)
        assert whole_end == end and len(cols) == len(records)
    assert ENDED_AT_CORRUPT in ends and ENDED_AT_LIMIT in ends


def test_data_end_is_where_the_records_end_not_the_preallocated_size(tmp_path: Path):
    written = write_commitlog(tmp_path, mixed_messages(900, body_size=300),
                              segment_size=256 * 1024)
    segments = list_segments(tmp_path / "commitlog")
    assert len(segments) >= 2 and all(s.size == 256 * 1024 for s in segments)
    last = written[-1]
    tail = segments[-1]
    assert data_end(tail) == last.phy_offset + last.size - tail.start_offset < tail.size
    for seg in segments[:-1]:  # full segments end with their blank marker
        records = [w for w in written if seg.start_offset <= w.phy_offset < tail.start_offset
                   and w.phy_offset < seg.start_offset + seg.size]
        end = records[-1].phy_offset + records[-1].size - seg.start_offset
        assert end < data_end(seg) <= end + 8
    empty = tmp_path / "empty" / f"{0:020d}"
    empty.parent.mkdir()
    empty.write_bytes(bytes(1 << 20))
    assert data_end(list_segments(empty.parent)[0]) == 0
