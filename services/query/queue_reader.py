"""Read-only view of one consume queue (``consumequeue/<topic>/<queue>/``) while it grows.

Segments are named by their first byte offset and mapped with ``ACCESS_READ``. The data of
the last segment ends at the first unit with size <= 0 or a negative offset (segments are
preallocated); the end is found by binary search, since the builder fills units in order and a
unit it is still writing reads as empty. Every segment before the last is full. Pre-blank units
(``(0, 0x7FFFFFFF, 0)``, RocketMQ's ``fillPreBlank``) are not messages: the queue's minimum
offset is the first unit after them whose record is still in the commitlog.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from rmqstore.segments import parse_segment_name
from services.query.mapped_files import MappedFiles

PRE_BLANK_SIZE = 0x7FFFFFFF


@dataclass(frozen=True)
class Segment:
    first: int  # queue offset of its first unit
    units: np.ndarray  # every unit of the file (a read-only view of the mmap)

    @property
    def capacity(self) -> int:
        return len(self.units)


def _valid_prefix(units: np.ndarray) -> int:
    """Number of leading units with offset >= 0 and size > 0 (binary search)."""
    lo, hi = 0, len(units)
    while lo < hi:
        mid = (lo + hi) // 2
        u = units[mid]
        if u["size"] > 0 and u["offset"] >= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


class QueueView:
    """A snapshot of one queue: segments, min and max offset (max = next to be written)."""

    def __init__(self, segments: list[Segment], commitlog_min: int) -> None:
        self.segments = segments
        if not segments:
            self.min_offset = 0
            self.max_offset = 0
            return
        last = segments[-1]
        self.max_offset = last.first + _valid_prefix(last.units)
        first = segments[0]
        n = first.capacity if len(segments) > 1 else self.max_offset - first.first
        self.min_offset = first.first + _first_message(first.units, n, commitlog_min)

    def segment_of(self, offset: int) -> Segment | None:
        for seg in reversed(self.segments):
            if seg.first <= offset < seg.first + seg.capacity:
                return seg
            if seg.first <= offset:
                return None
        return None

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tags code) of a unit below max_offset, or None."""
        seg = self.segment_of(offset)
        if seg is None or offset >= self.max_offset:
            return None
        u = seg.units[offset - seg.first]
        return int(u["offset"]), int(u["size"]), int(u["tags_code"])


def _first_message(units: np.ndarray, n: int, commitlog_min: int) -> int:
    """Index of the first of ``n`` units that is a message still in the commitlog.

    Pre-blank units and units whose record was deleted come first (offsets ascend), so this
    is a binary search.
    """
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        u = units[mid]
        off, size = int(u["offset"]), int(u["size"])
        if off < commitlog_min or (off == 0 and size == PRE_BLANK_SIZE):
            lo = mid + 1
        else:
            hi = mid
    return lo


class QueueCatalog:
    """Consume-queue segments of a store, mapped read-only and cached by path."""

    def __init__(self, consumequeue_dir: Path) -> None:
        self.dir = Path(consumequeue_dir)
        self._files = MappedFiles(
            lambda _path, mm: np.frombuffer(mm, dtype=UNIT_DTYPE, count=len(mm) // UNIT_SIZE),
            min_size=UNIT_SIZE,
        )

    def exists(self, topic: str, queue_id: int) -> bool:
        return (self.dir / topic / str(queue_id)).is_dir()

    def topic_exists(self, topic: str) -> bool:
        return (self.dir / topic).is_dir()

    def view(self, topic: str, queue_id: int, commitlog_min: int = 0) -> QueueView | None:
        """The queue as it is now, or None if it does not exist."""
        qdir = self.dir / topic / str(queue_id)
        try:
            listing = os.listdir(qdir)
        except (FileNotFoundError, NotADirectoryError):
            return None
        named = sorted(
            (start, name) for name in listing if (start := parse_segment_name(name)) is not None
        )
        segments = []
        for start, name in named:
            units = self._units(qdir / name)
            if units is None or start % UNIT_SIZE:
                continue
            segments.append(Segment(start // UNIT_SIZE, units))
        return QueueView(segments, commitlog_min)

    def _units(self, path: Path) -> np.ndarray | None:
        """Units of a segment; remapped when the file was replaced or resized."""
        return self._files.get(path)

    def close(self) -> None:
        self._files.close()
