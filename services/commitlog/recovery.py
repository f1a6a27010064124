"""Start-up recovery of the commitlog: find where valid data ends, cut the rest.

* Every segment must have the configured size and follow the previous one.
* The last three segments are decoded fully with CRC checks; earlier ones are trusted.
* The first bad record (torn write, bit flip, zeros) ends the data: the rest of its segment
  is zeroed and every later segment file (e.g. one pre-created) is deleted. Whatever of that
  is not zero is first copied into the quarantine (``rmqstore.quarantine``, through the
  ``keep`` callback) and logged at ERROR: recovery never deletes written bytes silently.
* The per-queue next offsets come from the writer's snapshot when it is still valid, and from
  the records after it (or after the start) otherwise: the checked segments count them while
  they are checked, earlier segments by reading their records without CRCs.
"""

import errno
import json
import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rmqstore.durable import replace_file
from rmqstore.formats import commitlog
from services.commitlog import segment_scan
from services.commitlog.segment_files import Segment, SegmentQueue

log = logging.getLogger(__name__)
CRC_CHECKED_SEGMENTS = 3
_ZERO = bytes(1 << 20)


Keep = Callable[[int, memoryview, str, str], None]  # offset, bytes, segment name, reason


@dataclass
class Recovered:
    end: int = 0
    queue_table: dict[tuple[str, int], int] = field(default_factory=dict)
    last_store_timestamp: int = 0
    removed_files: list[str] = field(default_factory=list)
    corruption: str = ""
    scanned_bytes: int = 0
    quarantined_bytes: int = 0  # cut bytes (not zero) kept aside


def load_snapshot(path: Path) -> tuple[int, dict[tuple[str, int], int]] | None:
    try:
        doc = json.loads(path.read_text())
        table = {}
        for k, v in doc["queues"].items():
            topic, _, qid = k.rpartition("/")
            table[(topic, int(qid))] = int(v)
        return int(doc["offset"]), table
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_snapshot(path: Path, offset: int, table: dict[tuple[str, int], int]) -> None:
    """Atomically record the queue table valid at commitlog ``offset`` (durable by then)."""
    doc = {"offset": offset, "queues": {f"{t}/{q}": n for (t, q), n in table.items()}}
    replace_file(path, json.dumps(doc).encode())


def zero_tail(seg: Segment, start: int) -> None:
    """Zero [start, size) of a segment where not already zero. Ranges the file system reports
    as holes (never written, or preallocated and not written since) read as zeros and are
    skipped, so the tail of a fresh segment is not read page by page."""
    pos = start
    while pos < seg.size:
        try:
            pos = os.lseek(seg.fd, pos, os.SEEK_DATA)
            data_end = min(os.lseek(seg.fd, pos, os.SEEK_HOLE), seg.size)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after pos
                return
            data_end = seg.size  # holes not reported here: check every byte
        _zero_range(seg.map, pos, data_end)
        pos = data_end


def _zero_range(mm: mmap.mmap, pos: int, end: int) -> None:
    while pos < end:
        step = min(len(_ZERO), end - pos)
        if mm[pos : pos + step] != _ZERO[:step]:
            mm[pos : pos + step] = _ZERO[:step]
        pos += step


def _last_nonzero(mm: mmap.mmap, pos: int, end: int) -> int | None:
    """The end of the last byte in [pos, end) that is not zero, or None."""
    b = end
    while b > pos:
        a = max(pos, b - len(_ZERO))
        kept = mm[a:b].rstrip(b"\0")
        if kept:
            return a + len(kept)
        b = a
    return None


def _data_end(seg: Segment, begin: int) -> int:
    """The end of the last byte of ``seg`` at or after ``begin`` that is not zero (``begin``
    when none is); holes the file system reports are skipped unread, as in ``zero_tail``."""
    last, pos = begin, begin
    while pos < seg.size:
        try:
            pos = os.lseek(seg.fd, pos, os.SEEK_DATA)
            data_end = min(os.lseek(seg.fd, pos, os.SEEK_HOLE), seg.size)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            data_end = seg.size
        found = _last_nonzero(seg.map, pos, data_end)
        if found is not None:
            last = found
        pos = data_end
    return last


def quarantine_beyond(segs: list[Segment], end: int, reason: str, keep: Keep | None,
                out: Recovered) -> None:
    """Copy every byte recovery is about to cut (past ``end``) that is not zero aside."""
    for seg in segs:
        if seg.end <= end:
            continue
        begin = max(end - seg.start, 0)
        stop = _data_end(seg, begin)
        if stop <= begin:
            continue
        if keep is None:
            raise RuntimeError("recovery would cut written bytes and has nowhere to keep them")
        with memoryview(seg.map) as view:
            keep(seg.start + begin, view[begin:stop], seg.path.name, reason)
        out.quarantined_bytes += stop - begin
        log.error("commitlog recovery: cut [%d, %d) (%d bytes, segment %s, file offsets "
                  "%d..%d) and kept them in the quarantine: %s", seg.start + begin,
                  seg.start + stop, stop - begin, seg.path.name, begin, stop, reason)


def recover(segments: SegmentQueue, snapshot: Path, parallel_bytes: int | None = None,
            keep: Keep | None = None) -> Recovered:
    """Find the end of valid data, keep aside (``keep``) and cut the rest, rebuild the queue
    table. Segments are read on every core once there are ``parallel_bytes`` to read
    (default ``segment_scan.PARALLEL_BYTES``)."""
    if parallel_bytes is None:
        parallel_bytes = segment_scan.PARALLEL_BYTES
    out = Recovered()
    segments.open_existing(segments.existing_files())
    segs = segments.segments
    if not segs:
        return out
    checked = segs[max(0, len(segs) - CRC_CHECKED_SEGMENTS) :]
    snap = load_snapshot(snapshot)
    count_from = segments.min_offset if snap is None else snap[0]  # if the snapshot holds
    maps = {str(seg.path): seg.map for seg in checked}
    parts = [
        segment_scan.Part(str(seg.path), seg.start, 0, seg.size,
                          min(max(count_from - seg.start, 0), seg.size))
        for seg in checked
    ]
    ends = segment_scan.check_all(
        parts, lambda part: segment_scan.check(maps[part.path], part), parallel_bytes
    )
    end = segs[0].start
    for seg, found in zip(checked, ends, strict=True):
        out.scanned_bytes += found.position
        end = seg.start + found.position
        err = found.corruption()
        if err is not None:
            out.corruption = f"{seg.path.name} at offset {err.offset}: {err}"
            log.warning("commitlog recovery: cutting at %s", out.corruption)
            break
        if found.blank is None:
            break
        end = seg.end  # a blank record fills the segment: data goes on in the next one
    out.end = end
    quarantine_beyond(segs, end, out.corruption or f"bytes past the end of valid data at {end}",
                keep, out)
    head = None
    for seg in segs:
        if seg.start <= end < seg.end:
            head = seg
    if head is not None:
        tail_at = end - head.start
        zero_tail(head, tail_at)
        head.map.flush()
        head.wrote = head.flushed = tail_at
    out.removed_files = [p.name for p in segments.remove_beyond(end)]
    for seg in segments.segments:
        if seg is not head:
            seg.wrote = seg.flushed = seg.size
    counted = {
        seg.start: (part.count_from, found)
        for seg, part, found in zip(checked, parts, ends, strict=True)
    }
    _rebuild_queue_table(segments, snap, counted, out, parallel_bytes)
    return out


def _rebuild_queue_table(segments: SegmentQueue,
                         snap: tuple[int, dict[tuple[str, int], int]] | None,
                         counted: dict[int, tuple[int, segment_scan.ScanEnd]],
                         out: Recovered, parallel_bytes: int) -> None:
    """Queue table from the snapshot (if it lies within the data) and the records after it:
    ``counted`` holds what the check counted per segment start (and from where); segments
    not counted from the right place are read again (without CRCs)."""
    start = segments.min_offset
    table: dict[tuple[str, int], int] = {}
    if snap is not None and snap[0] <= out.end:
        # a snapshot older than the first segment left (retention deleted the rest) still
        # holds the counters of queues with no record left; the records' own queue offsets
        # raise the others below
        table = dict(snap[1])
        start = max(snap[0], segments.min_offset)
    found: dict[int, segment_scan.Heads | segment_scan.ScanEnd] = {}
    parts = []
    for seg in segments.segments:
        if seg.end <= start or seg.start >= out.end:
            continue
        begin = max(start - seg.start, 0)
        if seg.start in counted and counted[seg.start][0] == begin:
            found[seg.start] = counted[seg.start][1]
        else:
            parts.append(segment_scan.Part(str(seg.path), seg.start, begin,
                                           min(out.end - seg.start, seg.size)))
    maps = {str(seg.path): seg.map for seg in segments.segments}
    walked = segment_scan.heads_all(
        parts, lambda part: segment_scan.heads(maps[part.path], part), parallel_bytes
    )
    for part, h in zip(parts, walked, strict=True):
        if h.error is not None:
            log.error("commitlog recovery: %s; queue offsets after it are not counted", h.error)
        found[part.start] = h
        out.scanned_bytes += part.limit - part.begin
    last_ts_pos = None
    for seg in segments.segments:
        got = found.get(seg.start)
        if got is None:
            continue
        for key, next_offset in got.next_offsets.items():
            if table.get(key, 0) < next_offset:
                table[key] = next_offset
        if got.last_position is not None:
            last_ts_pos = (seg, got.last_position)
    if last_ts_pos is not None:
        seg, pos = last_ts_pos
        hdr = commitlog.decode(seg.map, pos, check_crc=False)
        out.last_store_timestamp = hdr.store_timestamp
    out.queue_table = table
