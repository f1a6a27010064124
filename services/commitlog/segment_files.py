"""Commitlog segment files: fixed-size, fully allocated, memory-mapped, named by start offset.

A segment is created with ``posix_fallocate`` so that a full disk fails at creation with a
clear error instead of a SIGBUS on a later write. Appends go into the file with ``pwrite``
and everything reads through the mapping (the two share the page cache, so a read sees a
write as soon as it returns). Written through the mapping, each fresh page cost a page fault
and the kernel zeroing the page before the copy overwrote it; ``pwrite`` fills whole pages
straight from the buffer, with Python's lock released.
"""

import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from itertools import accumulate
from pathlib import Path

from rmqstore.errors import DiskFullError, OffsetOutOfRangeError, StoreError
from rmqstore.formats import commitlog
from rmqstore.segments import parse_segment_name, segment_name

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE


class Segment:
    """One mapped segment. ``wrote`` is the write position inside it."""

    def __init__(self, path: Path, start: int, size: int) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = os.open(path, os.O_RDWR)
        try:
            self.map = mmap.mmap(self.fd, size, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(self.fd)
            raise
        self.wrote = 0
        self.flushed = 0
        self.released = 0

    def write(self, at: int, data: bytes | memoryview) -> None:
        """Write ``data`` at position ``at`` of the segment (OSError if the disk fails)."""
        view, done = memoryview(data), 0
        while done < len(view):  # pwrite may write less than asked
            n = os.pwrite(self.fd, view[done:], at + done)
            if n <= 0:
                left = len(view) - done
                raise OSError(errno.EIO, f"wrote nothing of {left} bytes", self.path.name)
            done += n

    @property
    def end(self) -> int:
        return self.start + self.size

    def flush(self, upto: int | None = None) -> None:
        """Make [flushed, upto) durable. Linux writes back pages dirtied through a shared
        mapping on fdatasync, which (unlike mmap.flush) releases the GIL while it waits."""
        upto = self.wrote if upto is None else upto
        if upto <= self.flushed:
            return
        os.fdatasync(self.fd)
        self.flushed = upto
        self._release(upto - upto % PAGE)

    def _release(self, upto: int) -> None:
        """Drop durable pages from this process's mappings (they stay in the page cache), so
        the writer's resident memory does not grow with the segment."""
        if upto > self.released and hasattr(mmap, "MADV_DONTNEED"):
            self.map.madvise(mmap.MADV_DONTNEED, self.released, upto - self.released)
            self.released = upto

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a reader still holds a view; the mapping dies with it
            log.warning("segment %s still referenced at close", self.path.name)
        os.close(self.fd)


def _starts_with_data(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(8) != bytes(8)


def extend_segment_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno in (28, 122):
                raise DiskFullError(f"no space to extend commitlog segment {path.name}") from e
            raise
        os.fsync(fd)
    finally:
        os.close(fd)


def create_segment_file(path: Path, size: int, warmup: bool = False) -> None:
    """Create a zero-filled, fully allocated segment file atomically (temp name, rename)."""
    tmp = path.with_name(path.name + ".creating")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            os.close(fd)
            fd = -1
            tmp.unlink(missing_ok=True)
            if e.errno in (28, 122):  # ENOSPC, EDQUOT
                raise DiskFullError(
                    f"no space for commitlog segment {path.name} ({size} bytes)"
                ) from e
            raise StoreError(f"cannot create commitlog segment {path.name}: {e}") from e
        if warmup:
            with mmap.mmap(fd, size, access=mmap.ACCESS_WRITE) as m:
                for off in range(0, size, PAGE):
                    m[off] = 0
        os.fsync(fd)
    finally:
        if fd >= 0:
            os.close(fd)
    os.rename(tmp, path)


class SegmentQueue:
    """The ordered segments of a commitlog directory, plus a pre-created next one."""

    def __init__(
        self, directory: Path, segment_size: int, warmup: bool = False, preallocate: bool = True
    ) -> None:
        self.dir = directory
        self.size = segment_size
        self.warmup = warmup
        self.preallocate = preallocate
        self.segments: list[Segment] = []
        self.retired: list[Segment] = []  # deleted, mapping not closed yet
        self._prealloc: threading.Thread | None = None
        self._prealloc_error: BaseException | None = None
        directory.mkdir(parents=True, exist_ok=True)
        for stray in directory.glob("*.creating"):
            stray.unlink()

    def existing_files(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.dir.iterdir():
            start = parse_segment_name(p.name)
            if start is not None and p.is_file():
                out.append((start, p))
        out.sort()
        return out

    def open_existing(self, files: list[tuple[int, Path]]) -> None:
        """Map every segment; a gap is allowed only before never-written (stray) files."""
        for i, (start, path) in enumerate(files):
            actual = path.stat().st_size
            later = [p for _, p in files[i + 1 :]]
            if actual < self.size and not any(_starts_with_data(p) for p in later):
                # the last segment with data lost its tail (a copy cut short, a file system that
                # did not keep the allocation): extend it with zeros; recovery finds the end
                log.warning(
                    "commitlog segment %s is %d bytes, extending it to %d",
                    path.name,
                    actual,
                    self.size,
                )
                extend_segment_file(path, self.size)
                actual = self.size
            if actual != self.size:
                raise StoreError(
                    f"commitlog segment {path} is {actual} bytes but the segment size is "
                    f"{self.size} (check --commitlog-segment-size)"
                )
            if start % self.size:
                raise StoreError(f"commitlog segment {path.name} is not on a segment boundary")
            if self.segments and start != self.segments[-1].end:
                rest = [p for _, p in files[i:]]
                if any(_starts_with_data(p) for p in rest):
                    raise StoreError(
                        f"commitlog segment {path.name} does not follow "
                        f"{self.segments[-1].path.name}: a segment is missing"
                    )
                for p in rest:
                    log.warning("removing stray pre-created segment %s", p.name)
                    p.unlink()
                return
            self.segments.append(Segment(path, start, self.size))

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def find(self, offset: int) -> Segment:
        segments = self.segments  # one snapshot: retention replaces the list, never edits it
        if not segments or not segments[0].start <= offset < segments[-1].end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the commitlog segments (below the store's "
                "minimum offset, or past its end)"
            )
        seg = segments[(offset - segments[0].start) // self.size]
        assert seg.start <= offset < seg.end
        return seg

    def retire_first(self) -> Segment:
        """Take the oldest segment out (the caller holds the append lock and made sure it is
        not the last) and delete its file. Its mapping stays open for readers that found it
        a moment ago: ``close_retired`` closes it later."""
        seg = self.segments[0]
        self.segments = self.segments[1:]
        seg.path.unlink(missing_ok=True)
        self.retired.append(seg)
        return seg

    def close_retired(self) -> None:
        while self.retired:
            self.retired.pop().close()

    def ensure_file(self, start: int) -> None:
        """Make sure the segment file starting at ``start`` exists (raises DiskFullError)."""
        path = self.dir / segment_name(start)
        if not path.exists():
            self._join_prealloc()
            if not path.exists():
                create_segment_file(path, self.size, self.warmup)

    def ensure_room(self, head: Segment | None, end: int, sizes: Sequence[int]) -> None:
        """Create every segment file a batch of records of ``sizes`` will need, written from
        the head segment's write position (or from ``end``, the commitlog's end, when there is
        no head), before any of it is written."""
        size = self.size
        start = head.start if head else end - end % size
        pos = head.wrote if head else end - start
        if head and pos + sum(sizes) + commitlog.BLANK_SIZE <= size:
            return  # the common case: the batch fits in the head segment
        needed = [] if head else [start]
        for n in sizes:
            if pos + n + commitlog.BLANK_SIZE > size:
                start += size
                pos = 0
                needed.append(start)
            pos += n
        for s in needed:
            self.ensure_file(s)

    def write_batch(
        self, head: Segment, sizes: Sequence[int], encode: Callable[[int, int, list[int]], bytes]
    ) -> tuple[Segment, list[int]]:
        """Write a batch of records from the head segment's write position on: the records
        [i, j) that fit in a segment as one write of ``encode(i, j, their offsets)``; a blank
        record ends a full segment and the next one is rolled (``ensure_room`` made its file).
        Returns the segment the batch ends in and every record's offset."""
        total = sum(sizes)
        wrote = head.wrote
        if wrote + total + commitlog.BLANK_SIZE <= head.size:  # one copy for the whole batch
            phys = list(accumulate(sizes[:-1], initial=head.start + wrote))
            head.write(wrote, encode(0, len(sizes), phys))
            head.wrote = wrote + total
            return head, phys
        seg, phys = head, []
        i, n = 0, len(sizes)
        while i < n:
            j, end = i, wrote
            while j < n and end + sizes[j] + commitlog.BLANK_SIZE <= seg.size:
                end += sizes[j]
                j += 1
            if j > i:
                at = list(accumulate(sizes[i : j - 1], initial=seg.start + wrote))
                seg.write(wrote, encode(i, j, at))
                seg.wrote = wrote = end
                phys += at
            if j < n:  # record j starts the next segment (it fits in an empty one)
                seg.write(wrote, commitlog.blank(seg.size - wrote))
                seg.wrote = seg.size
                seg = self.roll(seg.end)
                wrote = 0
            i = j
        return seg, phys

    def roll(self, start: int) -> Segment:
        """Make the segment starting at ``start`` the last one (create it if needed)."""
        self._join_prealloc()
        path = self.dir / segment_name(start)
        if not path.exists():
            create_segment_file(path, self.size, self.warmup)
        seg = Segment(path, start, self.size)
        self.segments.append(seg)
        if self.preallocate:
            self._start_prealloc(start + self.size)
        return seg

    def _start_prealloc(self, start: int) -> None:
        path = self.dir / segment_name(start)
        if path.exists():
            return

        def work() -> None:
            try:
                create_segment_file(path, self.size, self.warmup)
            except BaseException as e:  # reported on the next roll, which retries itself
                log.warning("pre-creating segment %s failed: %s", path.name, e)
                self._prealloc_error = e

        self._prealloc = threading.Thread(target=work, name="segment-prealloc", daemon=True)
        self._prealloc.start()

    def _join_prealloc(self) -> None:
        if self._prealloc is not None:
            self._prealloc.join()
            self._prealloc = None
            self._prealloc_error = None

    def remove_beyond(self, end: int) -> list[Path]:
        """Delete every segment file that starts after ``end`` (the end of valid data)."""
        self._join_prealloc()
        removed = []
        for start, path in self.existing_files():
            if start > end:
                for seg in [s for s in self.segments if s.path == path]:
                    self.segments.remove(seg)
                    seg.close()
                path.unlink()
                removed.append(path)
        return removed

    def close(self) -> None:
        self._join_prealloc()
        for seg in self.segments:
            seg.close()
        self.segments.clear()
        self.close_retired()
