"""Recent dispatch batches kept in memory, so subscribers near the head never decode files.

Each put call adds one chunk (a columnar ``DispatchBatch`` covering [start, end), serialized:
``WireBatch``); chunks are contiguous in commitlog order. A subscriber whose offset is a chunk
start gets whole chunks joined into one batch; anything older comes from the segment files.
"""

import bisect
import threading

from services.commitlog.wire_batch import WireBatch


class DispatchCache:
    def __init__(self, max_records: int = 262_144, max_chunks: int = 16_384) -> None:
        self.max_records = max_records
        self.max_chunks = max_chunks  # many one-message puts: bound the per-chunk overhead
        self._starts: list[int] = []
        self._batches: list[WireBatch] = []
        self._end = -1
        self._head = 0  # chunks before it were evicted
        self._records = 0
        self._lock = threading.Lock()

    def add(self, start: int, end: int, batch: WireBatch) -> None:
        with self._lock:
            if self._end != start:
                self._starts.clear()
                self._batches.clear()
                self._head = self._records = 0
            self._starts.append(start)
            self._batches.append(batch)
            self._end = end
            self._records += batch.records
            while (
                self._records > self.max_records or len(self._starts) - self._head > self.max_chunks
            ) and len(self._starts) - self._head > 1:
                self._records -= self._batches[self._head].records
                self._batches[self._head] = None  # type: ignore[call-overload]
                self._head += 1
            if self._head > 1024 and self._head * 2 > len(self._starts):
                del self._starts[: self._head]
                del self._batches[: self._head]
                self._head = 0

    def clear(self) -> None:
        with self._lock:
            self._starts.clear()
            self._batches.clear()
            self._head = self._records = 0
            self._end = -1

    def next_start(self, offset: int) -> int | None:
        """The first chunk start after ``offset`` (where a file-decoding reader can rejoin)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset, self._head)
            return self._starts[i] if i < len(self._starts) else None

    def _chunks(self, offset: int, max_records: int) -> list[WireBatch] | None:
        """Whole chunks from ``offset`` (a chunk start) until they hold ``max_records`` or
        more (a chunk is never split), or None if ``offset`` starts no cached chunk."""
        with self._lock:
            i = bisect.bisect_left(self._starts, offset, self._head)
            if i >= len(self._starts) or self._starts[i] != offset:
                return None
            chunks, n = [], 0
            while i < len(self._starts) and n < max_records:
                chunks.append(self._batches[i])
                n += self._batches[i].records
                i += 1
            return chunks

    def records_from(self, offset: int, limit: int) -> int | None:
        """Records cached from ``offset`` (a chunk start) on, counted up to ``limit``; None
        if not cached."""
        chunks = self._chunks(offset, limit)
        return None if chunks is None else sum(c.records for c in chunks)

    def take(self, offset: int, max_records: int) -> WireBatch | None:
        """Joined chunks from ``offset`` (a chunk start), or None if not cached."""
        chunks = self._chunks(offset, max_records)
        return None if chunks is None else WireBatch.joined(chunks)
