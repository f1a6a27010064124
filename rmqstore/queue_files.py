"""The store's consume-queue files, read (never written) by the front ends on the store's
machine — the RocketMQ 5 proxy and the 4.x remoting broker — to find what a consumer has not
consumed yet without asking the query service.

A queue's segments are named by their first byte offset and preallocated, so the end of the
data is the first invalid unit (``consume_queue.is_valid``). Reads are ``pread``s of a
few units; a queue's segment list is cached and refreshed when a read runs past it.
"""

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rmqstore.formats import consume_queue as cq
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name


class Unit(NamedTuple):
    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int


class QueueFiles:
    def __init__(self, store: Path) -> None:
        self.layout = StoreLayout.of(store)
        self._segments: dict[tuple[str, int], list[tuple[int, Path]]] = {}
        # (topic, queue) -> (last segment's start, units valid in it) as max_offset last saw
        self._ends: dict[tuple[str, int], tuple[int, int]] = {}

    def _list(self, topic: str, queue: int, fresh: bool) -> list[tuple[int, Path]]:
        k = (topic, queue)
        segs = self._segments.get(k)
        if segs is None or fresh:
            qdir = self.layout.queue_dir(topic, queue)
            segs = []
            if qdir.is_dir():
                for f in qdir.iterdir():
                    start = parse_segment_name(f.name)
                    if start is not None:
                        segs.append((start, f))
            segs.sort()
            self._segments[k] = segs
        return segs

    def read(self, topic: str, queue: int, offset: int, count: int) -> list[Unit]:
        """Up to ``count`` valid units from queue offset ``offset`` on (fewer at the end)."""
        phys, sizes, codes = self.columns(topic, queue, offset, count)
        return [Unit(offset + j, *u) for j, u in enumerate(zip(phys, sizes, codes, strict=True))]

    def columns(
        self, topic: str, queue: int, offset: int, count: int
    ) -> tuple[list[int], list[int], list[int]]:
        """``read``'s units as three lists — commitlog offsets, sizes, tags codes — for the
        units from ``offset`` on: cheap for many units."""
        arr = self._units(topic, queue, offset, count)
        return arr["offset"].tolist(), arr["size"].tolist(), arr["tags_code"].tolist()

    def _units(self, topic: str, queue: int, offset: int, count: int) -> np.ndarray:
        segs = self._list(topic, queue, fresh=False)
        out = self._read(segs, offset, count)
        got = sum(len(a) for a in out)
        if got < count and not (segs and not self._past_last(segs, offset + got)):
            # the reader ran past the segments it knows of: a new one may have been started
            out += self._read(self._list(topic, queue, fresh=True), offset + got, count - got)
        if not out:
            return cq.units(b"")
        return out[0] if len(out) == 1 else np.concatenate(out)

    @staticmethod
    def _past_last(segs: list[tuple[int, Path]], offset: int) -> bool:
        """``offset`` lies beyond the last known segment's capacity (a new segment may
        have been started)."""
        start, path = segs[-1]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return True
        return offset * cq.UNIT_SIZE >= start + size

    def _read(self, segs: list[tuple[int, Path]], offset: int, count: int) -> list[np.ndarray]:
        want = offset * cq.UNIT_SIZE
        out: list[np.ndarray] = []
        got = 0
        for i, (start, path) in enumerate(segs):
            end = segs[i + 1][0] if i + 1 < len(segs) else None
            if want < start or (end is not None and want >= end):
                continue
            n = count - got
            if end is not None:
                n = min(n, (end - want) // cq.UNIT_SIZE)
            try:
                with open(path, "rb") as f:
                    data = os.pread(f.fileno(), n * cq.UNIT_SIZE, want - start)
            except FileNotFoundError:  # deleted by retention
                return out
            arr = cq.units(data)[: cq.valid_count(data)]
            out.append(arr)
            got += len(arr)
            if len(arr) < n or got >= count:
                return out
            want += len(arr) * cq.UNIT_SIZE
        return out

    def written(self, topic: str, queue: int, offset: int) -> bool:
        """Whether the unit at ``offset`` is written: one ``pread``, for long polling's
        frequent looks (the segment list is read again only past its last segment)."""
        at = offset * cq.UNIT_SIZE
        for fresh in (False, True):
            for start, path in reversed(self._list(topic, queue, fresh)):
                if start > at:
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:  # removed by retention
                    return False
                try:
                    unit = os.pread(fd, cq.UNIT_SIZE, at - start)
                finally:
                    os.close(fd)
                if len(unit) == cq.UNIT_SIZE:
                    return cq.is_valid(cq.decode(unit))
                break  # past this segment's end: a newer segment, if any, holds it
        return False

    def has_files(self, topic: str, queue: int) -> bool:
        return bool(self._list(topic, queue, fresh=True))

    def min_offset(self, topic: str, queue: int) -> int:
        segs = self._list(topic, queue, fresh=True)
        return segs[0][0] // cq.UNIT_SIZE if segs else 0

    def first_present(self, topic: str, queue: int, commitlog_min: int, fresh: bool = True) -> int:
        """The queue's first offset whose message is still in the commitlog (its unit points
        at or above ``commitlog_min``), as RocketMQ's ``correctMinOffset`` finds it: retention
        deletes commitlog segments while a consume-queue file partly below them stays. The
        queue's max offset when every unit points below. Units' commitlog offsets ascend,
        so each segment is a binary search of ``pread``s. ``fresh=False``: on the segment
        list as last read (by ``has_files`` just before)."""
        segs = self._list(topic, queue, fresh)
        if not segs:
            return 0
        if commitlog_min <= 0:
            return segs[0][0] // cq.UNIT_SIZE
        for start, path in segs:
            try:
                with open(path, "rb") as f:
                    fd = f.fileno()
                    lo, hi = 0, os.fstat(fd).st_size // cq.UNIT_SIZE  # [0, lo) gone
                    while lo < hi:
                        mid = (lo + hi) // 2
                        unit = cq.decode(os.pread(fd, cq.UNIT_SIZE, mid * cq.UNIT_SIZE))
                        if cq.is_valid(unit) and unit.commitlog_offset < commitlog_min:
                            lo = mid + 1
                        else:
                            hi = mid
                    size = os.fstat(fd).st_size // cq.UNIT_SIZE
                    if lo < size:  # a unit still present, or the end of the data
                        return start // cq.UNIT_SIZE + lo
            except FileNotFoundError:  # removed by its builder meanwhile: the next one
                continue
        return self.max_offset(topic, queue, fresh)

    def max_offset(self, topic: str, queue: int, fresh: bool = True) -> int:
        """One past the last unit (0 for a queue without files). The last segment's data
        ends at its first invalid unit, found by a binary search of ``pread``s (the file is
        preallocated: valid units, then zeros). ``fresh``: as in ``first_present``."""
        segs = self._list(topic, queue, fresh)
        if not segs:
            return 0
        start, path = segs[-1]
        try:
            with open(path, "rb") as f:
                fd = f.fileno()
                lo, hi = 0, os.fstat(fd).st_size // cq.UNIT_SIZE  # [0, lo) valid, [hi, ..) not
                seen = self._ends.get((topic, queue))
                # the end seen last, in the same segment: the data grew from there, or it was
                # cut (then the whole search)
                if seen and seen[0] == start and 0 < seen[1] <= hi and _valid_at(fd, seen[1] - 1):
                    lo = seen[1]
                    if lo < hi and not _valid_at(fd, lo):  # not grown: two preads
                        hi = lo
                while lo < hi:
                    mid = (lo + hi) // 2
                    unit = os.pread(fd, cq.UNIT_SIZE, mid * cq.UNIT_SIZE)
                    if len(unit) == cq.UNIT_SIZE and cq.is_valid(cq.decode(unit)):
                        lo = mid + 1
                    else:
                        hi = mid
        except FileNotFoundError:  # removed by retention meanwhile
            return start // cq.UNIT_SIZE
        self._ends[(topic, queue)] = (start, lo)
        return start // cq.UNIT_SIZE + lo


def _valid_at(fd: int, index: int) -> bool:
    unit = os.pread(fd, cq.UNIT_SIZE, index * cq.UNIT_SIZE)
    return len(unit) == cq.UNIT_SIZE and cq.is_valid(cq.decode(unit))
