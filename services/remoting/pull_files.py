"""The store's consume-queue and commitlog segment files as a 4.x pull reads them: mapped
read-only and kept mapped, so a pull costs no ``open``, ``listdir`` or ``pread`` while the
files stay as they are.

A directory's listing is checked with one ``stat`` (``Listing``: listed again when the
directory changed) on its first use in an iteration of the event loop, and not again in that
iteration. A request read after a check is answered after the loop has run what was
scheduled before it (the end of the check's iteration: asyncio runs scheduled callbacks in
order), so a segment retention removed, a queue the builder cut back to nothing, or a new
segment is seen by every pull read after it, as a fresh listing would see it; outside an
event loop every use checks. Segments are created at full size and linked into place, then
written in place (``MappedFiles``: a file replaced under its name is mapped again), so units
and records written, or units zeroed by a cut, are read through the mapping as they are
written. A file listed but not mappable (gone meanwhile) makes the next use list again.
"""

import asyncio
import bisect
import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import add, ne
from pathlib import Path

from rmqstore.formats import consume_queue as cq
from rmqstore.formats.commitlog import HEAD_SIZE, MAGICS, RECORD_HEAD, is_record_at
from rmqstore.layout import StoreLayout
from rmqstore.listing import Listing
from rmqstore.mapped_files import FilePath, MappedFiles, map_listed_segments

UNIT = cq.UNIT
UNIT_SIZE = cq.UNIT_SIZE
MAX_QUEUES = 16_384  # queues kept listed and mapped (a mapping is one of the process's maps)


def _mapped(_path: FilePath, mm: mmap.mmap) -> memoryview:
    return memoryview(mm)


@dataclass
class Segments:
    """A directory of segment files: (start, mapping) by start, as last listed."""

    listing: Listing
    starts: list[int] = field(default_factory=list)
    maps: list[memoryview] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    complete: bool = False  # every segment listed was mapped
    checked: int = -1  # the event-loop iteration (``PullFiles``'s count) it was checked in


class MappedSegments:
    """Directories of segment files, each listed again only when it changed."""

    def __init__(self) -> None:
        self._files: MappedFiles[memoryview] = MappedFiles(_mapped)

    def refresh(self, segs: Segments) -> None:
        """Bring ``segs`` up to date with its directory: one ``stat`` while unchanged."""
        if not segs.listing.refresh() and segs.complete:
            return
        mapped, segs.paths, segs.complete = map_listed_segments(self._files, segs.listing,
                                                                segs.paths)  # fmt: skip
        segs.starts = [start for start, _ in mapped]
        segs.maps = [mm for _, mm in mapped]

    def forget(self, segs: Segments) -> None:
        """Drop the mappings of ``segs`` (a pull still using one keeps it)."""
        self._files.forget(segs.paths)
        segs.starts, segs.maps, segs.paths, segs.complete = [], [], [], False

    def close(self) -> None:
        self._files.close()


class PullFiles:
    """A store's consume queues and commitlog, mapped (see the module's docstring)."""

    def __init__(self, store: Path) -> None:
        self.layout = StoreLayout.of(store)
        self._segments = MappedSegments()
        self._commitlog = Segments(Listing(str(self.layout.commitlog_dir)))
        self._queues: dict[tuple[str, int], Segments] = {}
        # (topic, queue) -> (last segment's start, units valid in it) as ``max_offset`` saw
        self._ends: dict[tuple[str, int], tuple[int, int]] = {}
        self._iteration = 0  # the event loop's iterations, counted from the first check
        self._iteration_open = False  # a check was made in this iteration

    def queue(self, topic: str, queue: int) -> Segments:
        """The queue's segments, brought up to date (none: no directory, or no file)."""
        key = (topic, queue)
        segs = self._queues.get(key)
        if segs is None:
            segs = Segments(Listing(str(self.layout.queue_dir(topic, queue))))
            if len(self._queues) >= MAX_QUEUES:  # the oldest goes, and its mappings
                self._segments.forget(self._queues.pop(next(iter(self._queues))))
            self._queues[key] = segs
        if not self._iteration_open or segs.checked != self._iteration:
            self._refresh(segs)
        return segs

    def _refresh(self, segs: Segments) -> None:
        """``MappedSegments.refresh``, for the first use in an event-loop iteration (the
        callers tell; see the module's docstring)."""
        self._segments.refresh(segs)
        if not self._iteration_open:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: every use checks
                return
            loop.call_soon(self._next_iteration)
            self._iteration_open = True
        segs.checked = self._iteration

    def _next_iteration(self) -> None:
        self._iteration += 1
        self._iteration_open = False

    def commitlog_min(self) -> int:
        """The commitlog's oldest segment's start (0 without segments), as listed now."""
        segs = self._commitlog
        if not self._iteration_open or segs.checked != self._iteration:
            self._refresh(segs)
        return segs.starts[0] if segs.starts else 0

    def max_offset(self, topic: str, queue: int, segs: Segments) -> int:
        """One past the queue's last written unit (the last segment's data ends at its first
        unwritten unit); from the end seen last when it still holds (two probes)."""
        if not segs.starts:
            return 0
        start, mm = segs.starts[-1], segs.maps[-1]
        lo, hi = 0, len(mm) // UNIT_SIZE
        seen = self._ends.get((topic, queue))
        if (seen is not None and seen[0] == start and 0 < seen[1] <= hi
                and cq.written_at(mm, seen[1] - 1)):  # fmt: skip
            lo = seen[1]
            if lo == hi or not cq.written_at(mm, lo):  # not grown
                return start // UNIT_SIZE + lo
        while lo < hi:
            mid = (lo + hi) // 2
            if cq.written_at(mm, mid):
                lo = mid + 1
            else:
                hi = mid
        self._ends[(topic, queue)] = (start, lo)
        return start // UNIT_SIZE + lo

    @staticmethod
    def first_present(segs: Segments, commitlog_min: int, max_offset: int) -> int:
        """The queue's first offset whose unit points at or above ``commitlog_min``
        (``rmqstore.queue_files.QueueFiles.first_present``'s rule); ``max_offset`` when
        every unit points below."""
        if not segs.starts:
            return 0
        if commitlog_min <= 0:
            return segs.starts[0] // UNIT_SIZE
        for start, mm in zip(segs.starts, segs.maps, strict=True):
            lo, hi = 0, len(mm) // UNIT_SIZE
            while lo < hi:
                mid = (lo + hi) // 2
                phy, size = cq.OFFSET_SIZE.unpack_from(mm, mid * UNIT_SIZE)
                if phy >= 0 and size > 0 and phy < commitlog_min:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < len(mm) // UNIT_SIZE:
                return start // UNIT_SIZE + lo
        return max_offset

    @staticmethod
    def units(segs: Segments, offset: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` written units (commitlog offset, size, tags code) from queue offset
        ``offset`` on, within the segment holding it; none when no listed segment holds it."""
        at = offset * UNIT_SIZE
        for start, mm in zip(segs.starts, segs.maps, strict=True):
            if start <= at < start + len(mm):
                a = at - start
                b = min(len(mm), a + count * UNIT_SIZE)
                out = list(UNIT.iter_unpack(mm[a : b - (b - a) % UNIT_SIZE]))
                if out and (out[-1][0] < 0 or out[-1][1] <= 0):  # not all written
                    for j, unit in enumerate(out):
                        if unit[0] < 0 or unit[1] <= 0:
                            return out[:j]
                return out
        return []

    @staticmethod
    def columns(
        segs: Segments, offset: int, count: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """``units``' commitlog offsets and sizes, as two tuples read in one call each, when
        the ``count`` units from ``offset`` are in one listed segment and all written; None
        otherwise (then ``units`` tells)."""
        at = offset * UNIT_SIZE
        for start, mm in zip(segs.starts, segs.maps, strict=True):
            if start <= at < start + len(mm):
                a = at - start
                if count <= 0 or a + count * UNIT_SIZE > len(mm):
                    return None
                offsets, sizes = cq.column_reads(count)
                phys, lens = offsets.unpack_from(mm, a), sizes.unpack_from(mm, a)
                return (phys, lens) if min(phys) >= 0 and min(lens) > 0 else None
        return None

    def records(self, wanted: Sequence[tuple[int, int]]) -> list[memoryview | None]:
        """The records' bytes at these (commitlog offset, size) pairs (views of the mapped
        segments: joined into the answer at once), from the commitlog's segments as last
        listed (``commitlog_min``), listed again once when one is not there; None for each
        the files cannot give (not there, or not that record: ask the writer)."""
        out = self._records(wanted)
        if None in out:  # a segment made since the listing?
            self._segments.refresh(self._commitlog)
            missing = [i for i, r in enumerate(out) if r is None]
            for i, r in zip(missing, self._records([wanted[i] for i in missing]), strict=True):
                out[i] = r
        return out

    def runs(self, wanted: Sequence[tuple[int, int]]) -> list[memoryview] | None:
        """The records at these (commitlog offset, size) pairs as views of the mapped
        segments, one view for each run of records adjacent in the commitlog, each record's
        head checked; None when one is not there as ``records`` reads it (then ask
        ``records``). ``ordered_runs`` does it from two heads for pairs in commitlog order."""
        starts, maps = self._commitlog.starts, self._commitlog.maps
        out: list[memoryview] = []
        start, mm, end = 0, memoryview(b""), 0
        run, at = -1, -1  # the current run in ``mm``: [run, at)
        head = RECORD_HEAD.unpack_from
        for phy, size in wanted:
            if not start <= phy < end:
                i = bisect.bisect_right(starts, phy) - 1
                if i < 0:
                    return None
                if run >= 0:
                    out.append(mm[run:at])
                    run = -1
                start, mm = starts[i], maps[i]
                end = start + len(mm)
            a = phy - start
            if a + size > end - start or size < HEAD_SIZE:
                return None
            total, magic, head_phy = head(mm, a)  # is_record_at's test, inline: per record
            if total != size or head_phy != phy or magic not in MAGICS:
                return None
            if a != at:
                if run >= 0:
                    out.append(mm[run:at])
                run = a
            at = a + size
        if run >= 0:
            out.append(mm[run:at])
        return out

    def ordered_runs(
        self, phys: Sequence[int], sizes: Sequence[int]
    ) -> list[memoryview] | None:
        """``runs`` of records in commitlog order (their offsets and sizes as two columns)
        within one segment, from two heads: the first's and the last's. The commitlog is
        written in order, so the last record there means every one before it is; a commitlog
        cut back below the last one (a recovery) fails the last's head as it would fail that
        record's own. One view for each run of records the units say are adjacent (a record
        ending where the next begins), found without a step per record in Python. None when
        the heads do not tell (then ``runs`` checks each record's)."""
        starts = self._commitlog.starts
        first, first_size, last, last_size = phys[0], sizes[0], phys[-1], sizes[-1]
        i = bisect.bisect_right(starts, first) - 1
        if i < 0 or first_size < HEAD_SIZE or last_size < HEAD_SIZE:
            return None
        start, mm = starts[i], self._commitlog.maps[i]
        a, b = first - start, last - start
        if a < 0 or b + last_size > len(mm):
            return None
        head = RECORD_HEAD.unpack_from
        total, magic, phy = head(mm, a)
        if total != first_size or phy != first or magic not in MAGICS:
            return None
        total, magic, phy = head(mm, b)
        if total != last_size or phy != last or magic not in MAGICS:
            return None
        # the records that begin a run: each whose offset is not where the one before ended
        ends = map(add, phys, sizes)
        cuts = list(compress(range(1, len(phys)), map(ne, ends, islice(phys, 1, None))))
        out, run = [], a  # run: where the current run begins in ``mm``
        for cut in cuts:
            out.append(mm[run : phys[cut - 1] + sizes[cut - 1] - start])
            run = phys[cut] - start
        out.append(mm[run : b + last_size])
        return out

    def _records(self, wanted: Sequence[tuple[int, int]]) -> list[memoryview | None]:
        starts, maps = self._commitlog.starts, self._commitlog.maps
        out: list[memoryview | None] = []
        start, mm, end = 0, memoryview(b""), 0
        for phy, size in wanted:
            if not start <= phy < end:
                i = bisect.bisect_right(starts, phy) - 1
                if i < 0:
                    out.append(None)
                    end = 0
                    continue
                start, mm = starts[i], maps[i]
                end = start + len(mm)
            a = phy - start
            if a + size <= end - start and is_record_at(mm, a, phy, size):
                out.append(mm[a : a + size])
            else:
                out.append(None)
        return out

    def close(self) -> None:
        self._segments.close()
