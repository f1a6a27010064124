"""Reading one schedule queue (``consumequeue/SCHEDULE_TOPIC_XXXX/<level - 1>/``) by offset.

The consume-queue builder writes these files; the delivery service only reads them, with
``pread`` (the builder's mapped writes are in the same page cache). The segment size is taken
from the files themselves, so a store written with any ``--cq-entries-per-file`` (or by
RocketMQ) reads the same. A queue's data ends at its first unit with size <= 0; pre-blank
units are returned as they are (the caller skips them).
"""

import os
from pathlib import Path

from rmqstore.formats import consume_queue as cq
from rmqstore.segments import parse_segment_name, segment_name

PRE_BLANK_SIZE = 0x7FFFFFFF


class ScheduleQueue:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._starts: list[int] = []  # byte offsets of the segment files, ascending
        self._file_size = 0
        self._fds: dict[int, int] = {}

    def _list(self) -> None:
        starts = []
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                start = parse_segment_name(p.name)
                if start is not None and start % cq.UNIT_SIZE == 0:
                    starts.append(start)
        starts.sort()
        for gone in set(self._fds) - set(starts):
            os.close(self._fds.pop(gone))
        self._starts = starts
        if starts and not self._file_size:
            size = (self.dir / segment_name(starts[0])).stat().st_size
            self._file_size = size - size % cq.UNIT_SIZE
        if len(starts) > 1:  # every segment but the last is full: their spacing is the size
            self._file_size = starts[1] - starts[0]

    def min_offset(self) -> int:
        """Queue offset of the first unit still on disk (0 for an empty queue)."""
        self._list()
        return self._starts[0] // cq.UNIT_SIZE if self._starts else 0

    def _fd(self, start: int) -> int | None:
        fd = self._fds.get(start)
        if fd is None:
            try:
                fd = os.open(self.dir / segment_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return None
            self._fds[start] = fd
        return fd

    def read(self, offset: int, limit: int) -> list[tuple[int, int, int]]:
        """Up to ``limit`` units (commitlog offset, size, tags code) from queue offset
        ``offset`` on, ending at the end of the data."""
        out: list[tuple[int, int, int]] = []
        pos = offset * cq.UNIT_SIZE
        listed = False
        while len(out) < limit:
            start = self._segment_of(pos)
            if start is None and not listed:
                self._list()
                listed = True
                start = self._segment_of(pos)
            if start is None:
                break
            fd = self._fd(start)
            if fd is None:
                break
            want = min(limit - len(out), (start + self._file_size - pos) // cq.UNIT_SIZE)
            data = os.pread(fd, want * cq.UNIT_SIZE, pos - start)
            n = len(data) // cq.UNIT_SIZE
            for i in range(n):
                unit = cq.UNIT.unpack_from(data, i * cq.UNIT_SIZE)
                if unit[1] <= 0 or unit[0] < 0:
                    return out
                out.append(unit)
            pos += n * cq.UNIT_SIZE
            if n < want:
                break
        return out

    def _segment_of(self, pos: int) -> int | None:
        size = self._file_size
        for start in reversed(self._starts):
            if start <= pos < start + size:
                return start
            if start <= pos:
                return None
        return None

    def end(self, hint: int = 0) -> int:
        """The next queue offset to be written (counting from ``hint``, a known offset)."""
        self._list()
        if not self._starts:
            return 0
        last = self._starts[-1]
        fd = self._fd(last)
        if fd is None:
            return hint
        lo = max(0, hint * cq.UNIT_SIZE - last) // cq.UNIT_SIZE
        hi = self._file_size // cq.UNIT_SIZE
        while lo < hi:  # units are written in order: the valid ones are a prefix
            mid = (lo + hi) // 2
            unit = cq.UNIT.unpack(os.pread(fd, cq.UNIT_SIZE, mid * cq.UNIT_SIZE).ljust(20, b"\0"))
            if unit[1] > 0 and unit[0] >= 0:
                lo = mid + 1
            else:
                hi = mid
        return (last // cq.UNIT_SIZE) + lo

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

