"""A store served ``--read-only``: records by offset and the offsets, without writing a byte.

Segments are opened read-only and mapped read-only. Nothing is created, cut, locked for
writing or recorded: no ``lock`` is made (an existing one is held shared, so a writer,
rmqstore's or RocketMQ's, is refused while we serve, and we are refused while one runs), no
``abort``, ``checkpoint``, ``rmqstore/`` or quarantine. Where the data ends is found as
recovery finds it (every record of the last segments checked), but nothing past it is cut: a
corrupt record there just ends what is served, with a WARNING. Puts, subscriptions and acks
are refused with FAILED_PRECONDITION.
"""

import bisect
import logging
import mmap
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqstore import identity
from rmqstore.errors import InvalidArgumentError, OffsetOutOfRangeError, ReadOnlyError
from rmqstore.formats import commitlog_segment
from rmqstore.layout import StoreLayout
from rmqstore.segments import parse_segment_name
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.commitlog.record_reads import read_records
from services.commitlog.recovery import Recovered
from services.commitlog.store_lock import ReadLock

log = logging.getLogger(__name__)
REFUSED = "the store is served read-only (--read-only): it takes no puts and feeds no builders"


class _Segment:
    def __init__(self, path: Path, start: int, size: int) -> None:
        self.path, self.start, self.size, self.end = path, start, size, start + size
        fd = os.open(path, os.O_RDONLY)
        try:
            self.map = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else b""
        finally:
            os.close(fd)

    def close(self) -> None:
        if isinstance(self.map, mmap.mmap):
            self.map.close()


class _Segments:
    def __init__(self, segments: list[_Segment]) -> None:
        self.segments = segments
        self._starts = [s.start for s in segments]

    def find(self, offset: int) -> _Segment:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0 or offset >= self.segments[i].end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside the commitlog segments")
        return self.segments[i]


@dataclass
class _NoFlushes:
    """What the writer's metrics read of its flusher: nothing is ever flushed here."""

    flushes: int = 0
    last_flush_seconds: float = 0.0


class _OneEpoch:
    """The writer's epochs as a read-only store has them: one, never cut."""

    current = 0

    @staticmethod
    def cut_offset_since(_epoch: int) -> int:
        return -1


class ReadOnlyStore:
    read_only = True

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.layout = StoreLayout.of(config.store)
        if not self.layout.root.is_dir():
            raise InvalidArgumentError(f"store {self.layout.root} is not a directory "
                                       "(--read-only serves an existing store)")
        self._lock = ReadLock(self.layout.lock)
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise

    def _open(self) -> None:
        t0 = time.perf_counter()
        self.store_id = identity.read(self.layout) or identity.derived(self.layout)
        self.last_exit_clean = not self.layout.abort.exists()
        size = self.config.segment_size
        segs: list[_Segment] = []
        for start, path in self._files():
            actual = path.stat().st_size
            if actual != size:
                raise InvalidArgumentError(f"{path} is {actual} bytes, not the segment size "
                                           f"{size} (--commitlog-segment-size)")
            if segs and start != segs[-1].end:
                raise InvalidArgumentError(f"{path} does not follow {segs[-1].path.name}")
            segs.append(_Segment(path, start, size))
        self.segments = _Segments(segs)
        self.recovered = Recovered()
        self.max_offset = self._data_end()
        self.recovered.end = self.max_offset
        self.recovery_seconds = time.perf_counter() - t0
        self.epochs = _OneEpoch()
        self.flusher = _NoFlushes()
        self.acks: dict[str, int] = {}
        self.bytes_written = 0
        log.info("serving %s read-only: commitlog [%d, %d), store id %s", self.layout.root,
                 self.min_offset, self.max_offset, self.store_id)

    def _files(self) -> Iterator[tuple[int, Path]]:
        d = self.layout.commitlog_dir
        if not d.is_dir():
            return
        for p in sorted(d.iterdir()):
            start = parse_segment_name(p.name)
            if start is not None and p.is_file():
                yield start, p

    def _data_end(self) -> int:
        """Where the data ends, found as recovery finds it, the last segments checked fully;
        nothing after it is touched."""
        segs = self.segments.segments
        if not segs:
            return 0
        for seg in reversed(segs):  # the last segment holding data
            end, blank, err = commitlog_segment.scan_end(seg.map, base_offset=seg.start)
            self.recovered.scanned_bytes += end
            if err is not None:
                self.recovered.corruption = f"{seg.path.name} at offset {seg.start + end}: {err}"
                log.warning("read-only: the data ends at a bad record, %s; nothing is cut",
                            self.recovered.corruption)
                return seg.start + end
            if end > 0 or blank is not None or seg is segs[0]:
                return seg.end if blank is not None else seg.start + end
        return segs[0].start

    @property
    def min_offset(self) -> int:
        segs = self.segments.segments
        return segs[0].start if segs else 0

    @property
    def flushed_offset(self) -> int:
        return self.max_offset

    def read(self, offsets: Sequence[int], max_bytes: int = 1 << 62) -> list[bytes]:
        return read_records(self.segments.find, self.min_offset, self.max_offset, offsets,
                            max_bytes)

    def lag(self) -> dict[str, int]:
        return {}

    def active_subscriptions(self) -> dict[str, int]:
        return {}

    # -- refused -------------------------------------------------------------------------
    def append(self, *_args: Any, **_kw: Any) -> Any:
        raise ReadOnlyError(REFUSED)

    put = on_durable = subscribe = ack = append

    def close(self) -> None:
        for seg in self.segments.segments:
            seg.close()
        self._lock.release()


Store = CommitLogEngine | ReadOnlyStore  # what the servicer and the metrics serve
