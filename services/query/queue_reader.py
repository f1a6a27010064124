"""Read-only view of one consume queue (``consumequeue/<topic>/<queue>/``) while it grows.

Segments are named by their first byte offset and mapped with ``ACCESS_READ``. The data of
the last segment ends at the first unit with size <= 0 or a negative offset (segments are
preallocated); the end is found by binary search, since the builder fills units in order and a
unit it is still writing reads as empty. Every segment before the last is full. Pre-blank units
(``(0, 0x7FFFFFFF, 0)``, RocketMQ's ``fillPreBlank``) are not messages: the queue's minimum
offset is the first unit after them whose record is still in the commitlog.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE
from rmqstore.listing import Listing
from rmqstore.mapped_files import MappedFiles, map_listed_segments

PRE_BLANK_SIZE = 0x7FFFFFFF
MAX_QUEUES = 65_536  # queues whose listing is kept


@dataclass(frozen=True)
class Segment:
    first: int  # queue offset of its first unit
    units: np.ndarray  # every unit of the file (a read-only view of the mmap)
    offsets: np.ndarray = field(init=False)  # its fields, for cheap probes one unit at a time
    sizes: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", self.units["offset"])
        object.__setattr__(self, "sizes", self.units["size"])

    @property
    def capacity(self) -> int:
        return len(self.units)


def _valid_prefix(seg: Segment) -> int:
    """Number of leading units with offset >= 0 and size > 0 (binary search)."""
    offsets, sizes = seg.offsets, seg.sizes
    lo, hi = 0, len(sizes)
    while lo < hi:
        mid = (lo + hi) // 2
        if sizes[mid] > 0 and offsets[mid] >= 0:
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
        self.max_offset = last.first + _valid_prefix(last)
        # the first message still in the commitlog: past whole segments the builder has not
        # deleted yet after a retention pass
        for seg in segments:
            n = seg.capacity if seg is not last else self.max_offset - seg.first
            skip = _first_message(seg, n, commitlog_min)
            self.min_offset = seg.first + skip
            if skip < n:
                break

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


def _first_message(seg: Segment, n: int, commitlog_min: int) -> int:
    """Index of the first of the segment's ``n`` units that is a message still in the
    commitlog.

    Pre-blank units and units whose record was deleted come first (offsets ascend), so this
    is a binary search.
    """
    offsets, sizes = seg.offsets, seg.sizes
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        off, size = int(offsets[mid]), int(sizes[mid])
        if off < commitlog_min or (off == 0 and size == PRE_BLANK_SIZE):
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass
class _Queue:
    """One queue directory: its listing and the segments mapped from it."""

    listing: Listing
    segments: list[Segment] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # the segment files listed
    complete: bool = False  # every listed segment is mapped (none was too short to)


class QueueCatalog:
    """Consume-queue segments of a store, mapped read-only and cached by path.

    A queue's directory is listed again only when it has changed (``listing.Listing``);
    between listings its mapped segments are used without asking the filesystem again
    (segments are created at full size and linked into place, then written in place).
    """

    def __init__(self, consumequeue_dir: Path) -> None:
        self.dir = Path(consumequeue_dir)
        self._files = MappedFiles(
            lambda _path, mm: np.frombuffer(mm, dtype=UNIT_DTYPE, count=len(mm) // UNIT_SIZE),
            min_size=UNIT_SIZE,
        )
        self._queues: dict[tuple[str, int], _Queue] = {}

    def exists(self, topic: str, queue_id: int) -> bool:
        return (self.dir / topic / str(queue_id)).is_dir()

    def topic_exists(self, topic: str) -> bool:
        return (self.dir / topic).is_dir()

    def view(self, topic: str, queue_id: int, commitlog_min: int = 0) -> QueueView | None:
        """The queue as it is now, or None if it does not exist."""
        key = (topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = _Queue(Listing(os.path.join(self.dir, topic, str(queue_id))))
        if queue.listing.refresh() or not queue.complete:
            self._map(queue)
        if queue.listing.names is None:
            self._queues.pop(key, None)
            return None
        if key not in self._queues:
            if len(self._queues) >= MAX_QUEUES:  # the oldest goes (its mappings stay cached)
                del self._queues[next(iter(self._queues))]
            self._queues[key] = queue
        return QueueView(queue.segments, commitlog_min)

    def _map(self, queue: _Queue) -> None:
        """Map the segments of the queue's listing; forget the files no longer listed."""
        mapped, queue.paths, queue.complete = map_listed_segments(self._files, queue.listing,
                                                                  queue.paths)  # fmt: skip
        queue.segments = [Segment(start // UNIT_SIZE, units) for start, units in mapped
                          if start % UNIT_SIZE == 0]  # fmt: skip

    def close(self) -> None:
        self._queues.clear()
        self._files.close()
