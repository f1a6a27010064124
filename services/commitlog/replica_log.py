"""A slave's commit log: a master's bytes copied in at its own end, record by record.

Frames ignore record boundaries; the segment files only ever take whole records. The first
part of a record waits in memory (``pending``) until its last byte has come, then the record
is checked and written, and readers and the dispatch stream see it (the engine's
``max_offset`` moves). So ``received`` (the end of the last byte taken from the master, where
the next frame must start) may be ahead of the files by one partial record, and what the
slave reports to its master, ``written``, is the end of whole records in its files: exactly
the ends of the master's messages that a synchronous master waits for. After a crash the
partial record is gone from memory, and the slave resumes from the last whole one (recovery
cuts any record torn while it was being written, as on a master).

Every record is checked before it is written: a known magic, a size that fits in its file,
its fields and body CRC (as recovery checks them), and the physical offset stored in its
header equal to where it lies (spec §6: a master that
starts sending from somewhere else in its own, different history is refused). An
end-of-file (BLANK) record is written with the rest of its file.

The checks run once per batch of frames that arrived together (the slave's hot path): the
records are found by stepping over their headers (one unpack each), then checked as numpy
columns, where the body CRC is the only other work per record in Python; a batch of a few
records is checked record by record instead (numpy's fixed cost per call is that of about a
hundred records checked one by one). Whole records are written with one call. The engine's
queue table follows the records' own queue offsets, so its snapshots hold on a slave as on a
master.
"""

from dataclasses import dataclass, field

import numpy as np

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike, commitlog
from rmqstore.formats.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2
from rmqstore.formats.commitlog_columns import decode_columns
from services.commitlog.engine import CommitLogEngine

_PHYS = commitlog.PHYSICAL_OFFSET_AT
_PHYS_END = _PHYS + 8
_HEADER = commitlog.BLANK  # a record's first 8 bytes: its total size and magic
_SMALL = 128  # records checked one by one up to this many (see ``_check``)


class Diverged(Exception):
    """The master's bytes do not continue this store's history; nothing of them is kept."""


@dataclass
class Published:
    """What whole records bring besides their bytes."""

    stamps: list[tuple[int, int]] = field(default_factory=list)  # (end offset, store time)
    queues: dict[tuple[str, int], int] = field(default_factory=dict)  # next queue offsets


def _long(buf: BytesLike, at: int) -> int:
    return int.from_bytes(buf[at : at + 8], "big", signed=True)


class ReplicaLog:
    def __init__(self, engine: CommitLogEngine) -> None:
        self.engine = engine
        self.file_size: int = engine.config.segment_size
        self.max_size: int = engine.config.max_message_size + 64 * 1024  # headers, properties
        self.pending = bytearray()  # the first part of the record at ``written``
        self.start = -1  # an empty store's first offset, once the master sent it

    @property
    def written(self) -> int:
        """The end of the whole records in the files (what the slave reports)."""
        return self.engine.max_offset

    @property
    def received(self) -> int:
        """Where the next frame must start (0: empty, anywhere)."""
        if self.start >= 0 and not self.written:
            return self.start + len(self.pending)
        return self.written + len(self.pending)

    def restart(self) -> int:
        """A new connection: forget any partial record (the master sends it again from the
        report) and return the offset to report."""
        self.pending.clear()
        self.start = -1
        return self.written

    @property
    def empty(self) -> bool:
        return self.received == 0

    @property
    def mid_record(self) -> bool:
        return bool(self.pending)

    def apply(self, offset: int, data: BytesLike) -> int:
        """``take`` then ``flush``."""
        self.take(offset, data)
        return self.flush()

    def take(self, offset: int, data: BytesLike) -> None:
        """Take ``data`` at ``offset`` (this store's end, or anywhere if empty); ``flush``
        writes what it completes (several frames at once check and write faster)."""
        if self.empty:
            self.start = offset
        elif offset != self.received:
            raise ValueError(f"bytes at {offset} do not follow this store's end {self.received}")
        self.pending += data

    def flush(self) -> int:
        """Check, write and publish the whole records taken; returns the end of whole records
        written. ``Diverged`` (nothing of the partial record kept) if one does not check out."""
        while self.pending:
            pos = self.received - len(self.pending)
            try:
                n, published = self._whole(pos)
            except Diverged:
                self.restart()
                raise
            if not n:
                break
            self.engine.write_replicated(pos, memoryview(self.pending)[:n])
            del self.pending[:n]
            self.engine.publish_replicated(pos + n, published.stamps, published.queues)
        return self.written

    def _whole(self, pos: int) -> tuple[int, Published]:
        """How many bytes of ``pending`` (which starts at ``pos``, a record start) are whole
        records of one file, and what they bring (store times, queue offsets)."""
        with memoryview(self.pending) as view:  # released before ``pending`` is cut
            return self._walk(pos, view)

    def _walk(self, pos: int, buf: memoryview) -> tuple[int, Published]:
        """Step over the records by their headers alone (one unpack each), then check the
        whole ones together."""
        unpack, have = _HEADER.unpack_from, len(buf)
        file_left = self.file_size - pos % self.file_size
        room, largest = file_left - commitlog.BLANK_SIZE, self.max_size  # a record's size
        starts: list[int] = []
        at, blank_end, stopped = 0, 0, None
        while have - at >= 8:
            size, magic = unpack(buf, at)
            if magic != MAGIC_V2 and magic != MAGIC_V1:
                if magic != BLANK_MAGIC:
                    stopped = Diverged(f"no record begins at offset {pos + at} (magic "
                                       f"{magic & 0xFFFFFFFF:#x})")  # fmt: skip
                elif size != file_left - at:
                    stopped = Diverged(f"the end-of-file record at {pos + at} claims "
                                       f"{size} bytes, but {file_left - at} are left in the "
                                       "file")  # fmt: skip
                elif size <= have - at:
                    blank_end = at + size  # it ends the file: what follows goes into the next
                break
            if not commitlog.HEAD_SIZE <= size <= room - at or size > largest:
                stopped = Diverged(f"the record at offset {pos + at} claims {size} bytes")
                break
            if size > have - at:
                break
            starts.append(at)
            at += size
        out = Published()
        if starts:  # the records before a refused header are checked first: they come first
            self._check(pos, buf, starts, at, out)
        if stopped is not None:
            raise stopped
        # a partial record from another history is refused before it is whole
        stored = _long(buf, at + _PHYS) if not blank_end and have - at >= _PHYS_END else pos + at
        if stored != pos + at:
            raise _elsewhere(pos + at, stored)
        return blank_end or at, out

    def _check(self, pos: int, buf: memoryview, starts: list[int], end: int, out: Published,
               ) -> None:  # fmt: skip
        """Check the whole records at ``starts`` (ending at ``end``) as recovery does (every
        field, the body CRC) and that each lies where its header says; fill ``out``. A few
        records one by one, more as columns (numpy's fixed cost pays off from about
        ``_SMALL`` records on)."""
        queues = out.queues
        if len(starts) <= _SMALL:
            for at in starts:
                try:
                    meta = commitlog.decode_meta(buf, at, True, pos)
                except CorruptRecordError as e:
                    if (stored := _long(buf, at + _PHYS)) != pos + at:
                        raise _elsewhere(pos + at, stored) from None
                    raise Diverged(f"the record at offset {pos + at} does not check out: "
                                   f"{e}") from None  # fmt: skip
                if meta.physical_offset != pos + at:
                    raise _elsewhere(pos + at, meta.physical_offset)
                if not meta.sys_flag & commitlog.NO_QUEUE_OFFSET_BIT:
                    key = (meta.topic, meta.queue_id)
                    if queues.get(key, 0) <= meta.queue_offset:
                        queues[key] = meta.queue_offset + 1
            out.stamps.append((pos + end, meta.store_timestamp))
            return
        cols, good_end, error = decode_columns(buf, 0, end, True, pos, positions=starts)
        elsewhere = np.flatnonzero(cols.physical_offset != cols.position + pos)
        if len(elsewhere) or error is not None or good_end != end:
            if len(elsewhere):
                at = int(cols.position[elsewhere[0]])
                raise _elsewhere(pos + at, int(cols.physical_offset[elsewhere[0]]))
            at = good_end
            if (stored := _long(buf, at + _PHYS)) != pos + at:  # first: as one by one
                raise _elsewhere(pos + at, stored)
            raise Diverged(f"the record at offset {pos + at} does not check out: {error}")
        out.stamps.append((pos + end, int(cols.store_timestamp[-1])))
        takes = (cols.sys_flag & commitlog.NO_QUEUE_OFFSET_BIT) == 0
        # a queue's offsets only grow along the log: its last record's is the largest
        for topic, queue_id, following in zip(
            cols.topic_id[takes].tolist(), cols.queue_id[takes].tolist(),
            (cols.queue_offset[takes] + 1).tolist(), strict=True,
        ):  # fmt: skip
            queues[cols.topics[topic], queue_id] = following


def _elsewhere(offset: int, stored: int) -> Diverged:
    return Diverged(f"the record at offset {offset} says it lies at {stored}: it is from "
                    "another history")  # fmt: skip
