"""Records read straight from a store's commitlog segment files, never written: what a
reader on the same store (the RocketMQ 5 protocol proxy) does instead of asking the writer.

A record is read by its physical offset and total size (both from its consume-queue unit)
with one ``pread`` of the segment holding it (segments are named by their first offset:
``rmqstore.segments``), and decoded by ``formats.commitlog`` (``records``). It is given only
when the bytes there are that record, whole (its size and physical offset match); otherwise —
a segment retention removed, a record whose bytes are not in the file yet, anything
unexpected — the answer is None and the caller asks the writer, whose answer stands.
Files are opened per call, so a removed segment is never held open.
"""

import bisect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import commitlog
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name, segment_name

T = TypeVar("T")


class CommitlogReads:
    def __init__(self, store: Path) -> None:
        self.dir = StoreLayout.of(store).commitlog_dir
        self._starts: list[int] = []  # segment start offsets, ascending (cached listing)
        self._listed = False

    def min_offset(self, fresh: bool = False) -> int:
        """The commitlog's minimum offset: its oldest segment's start (records below it were
        deleted by retention). From the cached listing unless ``fresh`` (or never listed):
        a cached answer may be below the truth, never above it."""
        if fresh or not self._listed:
            self._list()
        return self._starts[0] if self._starts else 0

    def _list(self) -> None:
        self._listed = True
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            names = []
        self._starts = sorted(s for s in map(parse_segment_name, names) if s is not None)

    def records(self, wanted: Sequence[tuple[int, int]]) -> list[commitlog.Record | None]:
        """The records at these (physical offset, total size) pairs, in order; None for
        each one the files cannot give (ask the writer)."""
        return self._each(wanted, self._decoded)

    def _each(
        self,
        wanted: Sequence[tuple[int, int]],
        read: Callable[[dict[int, int], int, int], T | None],
    ) -> list[T | None]:
        out: list[T | None] = [None] * len(wanted)
        fds: dict[int, int] = {}  # segment start -> open fd, for this call only
        listed = False  # the segment list is read again at most once a call
        try:
            for i, (offset, size) in enumerate(wanted):
                if size <= 0:
                    continue
                r = read(fds, offset, size)
                if r is None and not listed:  # a segment made or removed since the listing?
                    listed = True
                    self._list()
                    r = read(fds, offset, size)
                out[i] = r
        finally:
            for fd in fds.values():
                os.close(fd)
        return out

    def _bytes(self, fds: dict[int, int], offset: int, size: int) -> bytes | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        start = self._starts[i]
        fd = fds.get(start)
        if fd is None:
            try:
                fd = fds[start] = os.open(self.dir / segment_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return None
        return os.pread(fd, size, offset - start)

    def _decoded(self, fds: dict[int, int], offset: int, size: int) -> commitlog.Record | None:
        data = self._bytes(fds, offset, size)
        if data is None:
            return None
        try:
            r = commitlog.decode(data, 0, check_crc=False)
        except CorruptRecordError:  # not (yet) that record, or past the segment's end
            return None
        return r if r.physical_offset == offset and r.total_size == size else None
