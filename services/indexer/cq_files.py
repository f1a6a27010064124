"""The segment files of one consume queue: ``consumequeue/<topic>/<queueId>/<byte offset>``.

Each segment holds ``entries_per_file`` 20-byte units (``rmqstore.formats.consume_queue``),
is preallocated in full and mapped; unit n of the queue lives in segment n // entries_per_file.
Only the newest two segments of a queue stay mapped.
"""

import logging
from pathlib import Path

import numpy as np

from rmqstore.formats import consume_queue as cq
from rmqstore.segments import parse_segment_name, segment_name
from services.indexer.mapped import FileSizeError, MappedFile

log = logging.getLogger(__name__)

PRE_BLANK = (0, 0x7FFFFFFF, 0)  # what RocketMQ's fillPreBlank writes
OPEN_SEGMENTS = 2


class Segment:
    def __init__(self, number: int, file: MappedFile) -> None:
        self.number = number
        self.file = file
        self.units = np.frombuffer(file.mm, dtype=cq.UNIT_DTYPE)

    def close(self) -> None:
        self.file.flush()
        del self.units
        self.file.close()


class QueueFiles:
    """Writes, recovers and truncates one queue's segments."""

    def __init__(self, directory: Path, entries_per_file: int) -> None:
        self.dir = directory
        self.epf = entries_per_file
        self.file_size = cq.file_size(entries_per_file)
        self.on_disk: list[int] = []  # segment numbers with a file, ascending
        self.open: dict[int, Segment] = {}
        self.end = 0  # next unit number (RocketMQ's max offset in queue)
        self.last_offset = -1  # commitlog offset of the last unit, -1 when empty
        self.created_files = 0
        self.conflicts = 0
        self.gaps = 0
        self.new_dir = False  # the queue directory was created: fsync its parents
        self.dir_dirty = False  # a segment was created or deleted: fsync the directory

    # -- files -----------------------------------------------------------------------
    def load(self) -> None:
        """Find the segments on disk and where the data ends (first invalid unit)."""
        numbers = []
        for p in self.dir.iterdir():
            start = parse_segment_name(p.name)
            if start is None or not p.is_file():
                continue
            if start % self.file_size:
                raise FileSizeError(
                    f"{p}: segment offset {start} is not a multiple of the segment size "
                    f"{self.file_size} ({self.epf} entries per file)"
                )
            numbers.append(start // self.file_size)
        self.on_disk = sorted(numbers)
        self.end = self.on_disk[0] * self.epf if self.on_disk else 0
        for number in reversed(self.on_disk):
            seg = self.segment(number)
            valid = cq.valid_count(memoryview(seg.file.mm))
            if valid:
                self.end = number * self.epf + valid
                self.last_offset = int(seg.units["offset"][valid - 1])
                break
        self._evict()

    def segment(self, number: int, create: bool = False) -> Segment:
        seg = self.open.get(number)
        if seg is not None:
            return seg
        path = self.dir / segment_name(number * self.file_size)
        if number in self.on_disk:
            f = MappedFile.open(path, self.file_size)
        elif create:
            if not self.dir.is_dir():
                self.dir.mkdir(parents=True, exist_ok=True)
                self.new_dir = True
            f = MappedFile.create(path, self.file_size)
            self.on_disk.append(number)
            self.on_disk.sort()
            self.created_files += 1
            self.dir_dirty = True
        else:
            raise FileNotFoundError(path)
        seg = self.open[number] = Segment(number, f)
        return seg

    def _evict(self) -> None:
        while len(self.open) > OPEN_SEGMENTS:
            self.open.pop(min(self.open)).close()

    @property
    def dirty(self) -> bool:
        return any(s.file.dirty for s in self.open.values())

    def flush(self) -> None:
        for seg in self.open.values():
            seg.file.flush()

    def take_dirty_paths(self) -> list[Path]:
        """Paths of the open segments written since the last call (to sync later)."""
        return [seg.file.path for seg in self.open.values() if seg.file.take_dirty()]

    def close(self) -> None:
        for seg in self.open.values():
            seg.close()
        self.open.clear()

    # -- writing -----------------------------------------------------------------------
    def write(self, start: int, units: np.ndarray) -> int:
        """Put contiguous units at unit numbers ``start``…; return how many were new.

        Units already there with the same bytes are left as they are (replay); a different
        unit in their place is replaced (the commitlog is the truth) and counted in
        ``conflicts``.
        """
        n = len(units)
        if not self.on_disk:  # a new queue starts where its first unit is (RocketMQ's min)
            if start % self.epf:
                self._pre_blank(start)
            self.end = start
        elif start > self.end:
            self.gaps += 1
            log.warning(
                "%s: unit %d written after a gap (queue ends at %d)", self.dir, start, self.end
            )
        overlap_end = min(self.end, start + n)
        done = 0
        while done < n:
            at = start + done
            number, pos = divmod(at, self.epf)
            k = min(n - done, self.epf - pos)
            seg = self.segment(number, create=True)
            part = units[done : done + k]
            if at < overlap_end:
                m = min(k, overlap_end - at)
                old = seg.units[pos : pos + m].copy()
                differ = old != part[:m]
                if differ.any():
                    self.conflicts += int(np.count_nonzero(differ & (old["size"] > 0)))
                    seg.units[pos : pos + m] = part[:m]
                    seg.file.dirty = True
                if m < k:
                    seg.units[pos + m : pos + k] = part[m:]
                    seg.file.dirty = True
            else:
                seg.units[pos : pos + k] = part
                seg.file.dirty = True
            done += k
        new = max(0, start + n - max(self.end, start))
        if start + n >= self.end:
            self.end = start + n
            self.last_offset = int(units["offset"][-1])
        self._evict()
        return new

    def _pre_blank(self, start: int) -> None:
        """A queue that starts past unit 0: fill its first segment up to ``start``."""
        number, pos = divmod(start, self.epf)
        seg = self.segment(number, create=True)
        seg.units[:pos] = np.array([PRE_BLANK], dtype=cq.UNIT_DTYPE)
        seg.file.dirty = True
        self.end = start

    def delete_below(self, phy_min: int) -> int:
        """Delete segments, oldest first and never the last, whose last unit points below
        ``phy_min`` (the commitlog's new minimum: RocketMQ's deleteExpiredFileByOffset);
        returns how many were deleted."""
        deleted = 0
        while len(self.on_disk) > 1:
            number = self.on_disk[0]
            path = self.dir / segment_name(number * self.file_size)
            with open(path, "rb") as f:  # every segment but the last is full
                f.seek(self.file_size - cq.UNIT_SIZE)
                last = cq.decode(f.read(cq.UNIT_SIZE))
            if last.commitlog_offset >= phy_min:
                break
            seg = self.open.pop(number, None)
            if seg is not None:
                seg.close()
            path.unlink()
            self.on_disk.pop(0)
            self.dir_dirty = True
            deleted += 1
        return deleted

    def truncate(self, phy_end: int) -> None:
        """Cut every unit pointing at or past ``phy_end``; delete segments left empty."""
        while self.on_disk:
            number = self.on_disk[-1]
            seg = self.segment(number)
            valid = cq.valid_count(memoryview(seg.file.mm))
            offsets = seg.units["offset"][:valid].astype(np.int64)  # a copy: the map may go
            keep = int(np.searchsorted(offsets, phy_end, side="left"))
            if keep == 0:
                self.open.pop(number)
                seg.close()
                seg.file.path.unlink()
                self.dir_dirty = True
                self.on_disk.pop()
                continue
            if keep < valid:
                seg.units[keep:valid] = np.zeros(valid - keep, dtype=cq.UNIT_DTYPE)
                seg.file.dirty = True
            self.end = number * self.epf + keep
            self.last_offset = int(offsets[keep - 1])
            self._evict()
            return
        self.end = 0
        self.last_offset = -1
