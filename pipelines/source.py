"""Commitlog segments as independent units of work.

A record never crosses a segment, so every segment decodes on its own. A large segment is cut
into byte ranges so that a 1 GiB segment still spreads over several tasks. The driver cuts
near every ``split_bytes`` at a record that vouches for its own position
(``commitlog_segment.find_record``), reading a few pages per cut instead of walking every
record; each task then walks its range by record sizes, up to the first record at or past its
end, which must be exactly where the next range begins (``misaligned`` checks that once the
tasks are done; a job that finds a misaligned range plans again by walking every record
size, ``plan_ranges(walk=True)``, and runs again). Decoding goes through ``rmqstore.formats``
only (``commitlog_columns`` for a whole range at once); a range stops at the first corrupt or
torn record and says where and why.
"""

import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rmqstore.errors import CorruptRecordError, InvalidArgumentError
from rmqstore.formats import BytesLike, commitlog, commitlog_columns, commitlog_segment
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
# a cut looks this far past each split point for a record; none there (the segment's unused
# tail, or a record longer than this): the segment's last range runs from the cut before
CUT_WINDOW = 8 * 1024 * 1024

# how a range's data ended
ENDED_AT_LIMIT = "limit"  # the planned cut, the next range goes on
ENDED_AT_BLANK = "blank"  # the end-of-segment marker
ENDED_AT_ZEROS = "zeros"  # zeros or the end of the file: no more data in this segment
ENDED_AT_CORRUPT = "corrupt"  # a record that does not decode


@dataclass(frozen=True)
class Segment:
    path: str
    start_offset: int  # from the file name
    size: int  # file size in bytes


@dataclass(frozen=True)
class ByteRange:
    """Positions [begin, end) of one segment; ``end`` None means up to the segment's data end."""

    number: int  # position in commitlog order, over all ranges (of all stores, in order)
    segment: Segment
    begin: int
    end: int | None
    broker: str | None = None  # the store's broker, when the job reads named stores

    @property
    def last_of_segment(self) -> bool:
        return self.end is None

    @property
    def where(self) -> str:
        """The file and positions, for an error a task meets while reading them."""
        end = "its data end" if self.end is None else f"position {self.end}"
        return (f"{self.segment.path} (commitlog offset {self.segment.start_offset + self.begin}"
                f", positions {self.begin} to {end})")


@dataclass(frozen=True)
class Corruption:
    """A record that stopped its range: file, position in it, commitlog offset, reason."""

    file: str
    position: int
    offset: int
    reason: str

    def __str__(self) -> str:
        return (f"corrupt record in {self.file} at position {self.position} "
                f"(commitlog offset {self.offset}): {self.reason}")


@dataclass(frozen=True)
class RangeEnd:
    """Where the good data of a range ends and why."""

    position: int  # in the segment file
    ended_by: str
    corruption: Corruption | None = None


def commitlog_dir(store: str | Path) -> Path:
    """The commitlog directory of a store root, or the directory itself if it holds segments;
    absolute, as the tasks open it from their own working directories."""
    root = Path(store).absolute()
    candidate = StoreLayout.of(root).commitlog_dir
    if candidate.is_dir():
        return candidate
    if root.is_dir():
        return root
    raise InvalidArgumentError(f"{store} is neither a store root nor a commitlog directory")


def list_segments(directory: str | Path) -> list[Segment]:
    """Segment files (20-digit names) in offset order; other files are ignored."""
    out = []
    for entry in os.scandir(directory):
        start = parse_segment_name(entry.name)
        if start is not None and entry.is_file():
            out.append(Segment(entry.path, start, entry.stat().st_size))
    out.sort(key=lambda s: s.start_offset)
    return out


_BLOCK = 64 * 1024


def data_end(seg: Segment) -> int:
    """Where the segment's data ends, as far as its tail of zeros shows: segments are written
    from the start and preallocated with zeros, so this is about the bytes a job will read
    (the progress total), not the file's size. A block of zeros inside a body could make it
    short; it is only an estimate for the progress line, never used to read data."""
    if seg.size == 0:
        return 0
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        def zero(block: int) -> bool:
            return not m[block * _BLOCK:(block + 1) * _BLOCK].rstrip(b"\0")

        lo, hi = 0, (len(m) + _BLOCK - 1) // _BLOCK  # the first zero block of the tail
        while lo < hi:
            mid = (lo + hi) // 2
            if zero(mid):
                hi = mid
            else:
                lo = mid + 1
        if lo == 0:
            return 0
        last = m[(lo - 1) * _BLOCK:lo * _BLOCK]
        return (lo - 1) * _BLOCK + len(last.rstrip(b"\0"))


def _walked_cuts(buf, split_bytes: int) -> list[int]:
    """Positions to cut a segment at: a record start at least ``split_bytes`` after the last,
    every record size walked. The walk stops at a blank, zeros or damage: the decoding task
    finds out which."""
    starts = np.array(commitlog_columns.walk(buf)[0], dtype=np.int64)
    cuts: list[int] = []
    next_cut = split_bytes
    while True:
        i = int(np.searchsorted(starts, next_cut))
        if i == len(starts):
            return cuts
        cuts.append(int(starts[i]))
        next_cut = cuts[-1] + split_bytes


def _found_cuts(buf, split_bytes: int, base_offset: int) -> list[int]:
    """Positions to cut a segment at: the first record that vouches for its position at or
    after each split point (``find_record``), until a split point has none within
    ``CUT_WINDOW``."""
    cuts: list[int] = []
    at = split_bytes
    while at < len(buf):
        found = commitlog_segment.find_record(buf, at, at + CUT_WINDOW, base_offset)
        if found is None:
            return cuts
        cuts.append(found)
        at = found + split_bytes
    return cuts


def plan_ranges(segments: list[Segment], split_bytes: int = DEFAULT_SPLIT_BYTES,
                walk: bool = False) -> list[ByteRange]:
    """Cut each segment larger than ``split_bytes`` at records found near the split points,
    or with ``walk`` at record starts found by walking every record size (slower: the driver
    reads every record header; never misaligned)."""
    if split_bytes <= 0:
        raise InvalidArgumentError(f"split size {split_bytes} must be positive")
    ranges: list[ByteRange] = []
    for seg in segments:
        cuts: list[int] = []
        if seg.size > split_bytes:
            with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                cuts = (_walked_cuts(m, split_bytes) if walk
                        else _found_cuts(m, split_bytes, seg.start_offset))
        bounds = [0, *cuts]
        for i, begin in enumerate(bounds):
            end = bounds[i + 1] if i + 1 < len(bounds) else None
            ranges.append(ByteRange(len(ranges), seg, begin, end))
    return ranges


def misaligned(ranges: list[ByteRange], ends: dict[int, RangeEnd]) -> list[ByteRange]:
    """Ranges that do not begin where the walk of the range before them stopped: cut at bytes
    that only looked like a record (see ``find_record``), so what they read is not the
    commitlog's records: plan again with ``walk=True``."""
    return [r for prev, r in zip(ranges, ranges[1:], strict=False)
            if r.begin and ends[prev.number].ended_by == ENDED_AT_LIMIT
            and ends[prev.number].position != r.begin]


def replanned_note(bad: list[ByteRange]) -> str:
    """What a job that had to plan again by walking tells its user."""
    r = bad[0]
    return (f"{r.segment.path}: the range cut at position {r.begin} did not begin at a record "
            f"({len(bad)} such cut(s) in all); every record size was walked to cut again")


def iter_range(r: ByteRange, check_crc: bool = True, decoder: Callable[..., Any] | None = None,
               ) -> Iterator[tuple[int, Any] | RangeEnd]:
    """Yield (position, record) for every good record of the range, then its RangeEnd.

    Records are ``commitlog.Record``s, or ``commitlog.RecordMeta`` with
    ``decoder=commitlog.decode_meta`` (no body copy, for rebuilds)."""
    seg = r.segment
    if seg.size == 0:
        yield RangeEnd(0, ENDED_AT_ZEROS)
        return
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = r.begin
        try:
            for pos_, rec in commitlog_segment.iter_segment(m, r.begin, r.end, check_crc,
                                                    seg.start_offset, decoder):
                yield pos_, rec
                pos = pos_ + rec.total_size
        except CorruptRecordError as e:
            yield _range_end(m, r, pos, e)
            return
        yield _range_end(m, r, pos, None)


def read_range_columns(r: ByteRange, check_crc: bool = True,
                       ) -> tuple[commitlog_columns.RecordColumns, RangeEnd]:
    """Every good record of the range as columns (``commitlog_columns``), and its RangeEnd:
    the same records and end as ``iter_range``."""
    chunk, end = iter_range_columns(r, check_crc)
    assert isinstance(chunk, tuple) and isinstance(end, RangeEnd)
    return chunk[0], end


def iter_range_columns(r: ByteRange, check_crc: bool = True, max_records: int | None = None,
                       ) -> Iterator[tuple[commitlog_columns.RecordColumns, BytesLike] | RangeEnd]:
    """The good records of the range as columns, at most ``max_records`` at a time (at least
    one item, perhaps empty), each with the segment's bytes it was read from (for fields the
    columns leave out; valid until the next item), then its RangeEnd: the same records and
    end as ``iter_range``."""
    seg = r.segment
    if seg.size == 0:
        yield commitlog_columns.decode_columns(b"")[0], b""
        yield RangeEnd(0, ENDED_AT_ZEROS)
        return
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos, error = r.begin, None
        while True:
            cols, pos, error = commitlog_columns.decode_columns(
                m, pos, r.end, check_crc, seg.start_offset, max_records)
            yield cols, m
            if error is not None or max_records is None or len(cols) < max_records:
                break
        yield _range_end(m, r, pos, error)


def _range_end(m: mmap.mmap, r: ByteRange, pos: int, error: CorruptRecordError | None,
               ) -> RangeEnd:
    """Why the good data of range ``r`` ends at ``pos`` of its segment (mapped as ``m``)."""
    if error is not None:
        seg = r.segment
        return RangeEnd(pos, ENDED_AT_CORRUPT,
                        Corruption(seg.path, pos, seg.start_offset + pos, str(error)))
    if r.end is not None and pos >= r.end:
        return RangeEnd(pos, ENDED_AT_LIMIT)
    if pos + commitlog.BLANK_SIZE <= len(m) and \
            commitlog.peek(m, pos).magic == commitlog.BLANK_MAGIC:
        return RangeEnd(pos, ENDED_AT_BLANK)
    return RangeEnd(pos, ENDED_AT_ZEROS)


def valid_prefix(ranges: list[ByteRange], ends: dict[int, RangeEnd],
                 has_records: dict[int, bool]) -> tuple[set[int], list[str]]:
    """Which ranges hold the commitlog's data, read in order as recovery reads it.

    Data ends at the first corrupt record, or in the first segment that ends without a blank
    marker. Ranges after that are left out, as are ranges of a segment after its blank
    marker; the notes say what was left out and why.
    """
    included: set[int] = set()
    notes: list[str] = []
    stop: str | None = None
    expected_start: int | None = None
    marked: str | None = None  # the segment whose blank marker was met
    for r in ranges:
        if stop is not None:
            if has_records.get(r.number):
                notes.append(f"{r.segment.path} from position {r.begin}: records after the "
                             f"end of the commitlog's data ({stop}) were left out")
            continue
        if r.begin == 0 and expected_start is not None and r.segment.start_offset != expected_start:
            stop = f"segment {r.segment.path} does not start at offset {expected_start}"
            if has_records.get(r.number):
                notes.append(f"{stop}; it and later segments were left out")
            continue
        end = ends[r.number]
        if marked == r.segment.path:
            if has_records.get(r.number):
                notes.append(f"{r.segment.path} from position {r.begin}: records after the "
                             "segment's end marker were left out")
        else:
            included.add(r.number)
            if end.ended_by == ENDED_AT_CORRUPT:
                assert end.corruption is not None
                stop = str(end.corruption)
            elif end.ended_by == ENDED_AT_ZEROS:
                stop = f"data of {r.segment.path} ends at position {end.position} without a blank"
            elif end.ended_by == ENDED_AT_BLANK:
                marked = r.segment.path
        if r.last_of_segment:
            expected_start = r.segment.start_offset + r.segment.size
    return included, notes
