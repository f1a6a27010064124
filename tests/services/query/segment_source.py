"""A record source over commitlog segment files, for in-process tests of the lookups.

It follows the writer's ``ReadRecords`` contract (each offset must start a record, else
``OffsetOutOfRangeError``). Integration tests use the real writer process instead.
"""

import mmap
from collections.abc import Sequence
from pathlib import Path

from rmqstore.errors import CorruptRecordError, OffsetOutOfRangeError
from rmqstore.formats import commitlog, commitlog_segment
from rmqstore.segments import parse_segment_name


class SegmentRecordSource:
    def __init__(self, commitlog_dir: Path, segment_size: int) -> None:
        self.segment_size = segment_size
        self.maps: dict[int, mmap.mmap] = {}
        for p in sorted(Path(commitlog_dir).iterdir()):
            start = parse_segment_name(p.name)
            if start is None:
                continue
            with open(p, "rb") as f:
                self.maps[start] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.reads = 0
        starts = sorted(self.maps)
        self.min = starts[0] if starts else 0
        self.max = self.min
        for s in starts:
            end, _, _ = commitlog_segment.scan_end(memoryview(self.maps[s]), 0, False, s)
            self.max = s + end

    async def bounds(self) -> tuple[int, int]:
        return self.min, self.max

    async def read(self, offsets: Sequence[int]) -> list[bytes]:
        self.reads += 1
        out = []
        for off in offsets:
            start = off - off % self.segment_size
            m = self.maps.get(start)
            if m is None or not self.min <= off < self.max:
                raise OffsetOutOfRangeError(f"offset {off} is outside the commitlog")
            try:
                rec = commitlog.decode(memoryview(m), off - start, check_crc=False)
            except CorruptRecordError as e:
                raise OffsetOutOfRangeError(f"offset {off} does not start a record: {e}") from e
            out.append(bytes(m[off - start : off - start + rec.total_size]))
        return out

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
