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
end-of-file (BLANK) record is written with the rest of its file. The engine's queue table
follows the records' own queue offsets, so its snapshots hold on a slave as on a master.
"""

from dataclasses import dataclass, field

from rmqstore.formats import BytesLike, commitlog
from rmqstore.formats.commitlog import BLANK_MAGIC, MAGIC_V1, MAGIC_V2
from rmqstore.formats.commitlog_columns import decode_columns
from services.commitlog.engine import CommitLogEngine

_PHYS = commitlog.PHYSICAL_OFFSET_AT
_PHYS_END = _PHYS + 8
_MAGICS = (MAGIC_V1, MAGIC_V2)


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

    def _check(self, pos: int, buf: BytesLike, at: int, have: int) -> int:
        """The size of the record at ``pos`` (``buf[at:at + have]``, at least 8 bytes known),
        or of a BLANK record with the rest of its file; ``Diverged`` if it is not one."""
        if have < 8:
            return 0
        size, magic = commitlog.peek(buf, at)
        file_left = self.file_size - pos % self.file_size
        if magic == BLANK_MAGIC:
            if size != file_left:
                raise Diverged(f"the end-of-file record at {pos} claims {size} bytes, but "
                               f"{file_left} are left in the file")  # fmt: skip
            return file_left
        if magic not in _MAGICS:
            raise Diverged(f"no record begins at offset {pos} (magic {magic & 0xFFFFFFFF:#x})")
        if not commitlog.HEAD_SIZE <= size <= min(file_left - commitlog.BLANK_SIZE,
                                                  self.max_size):  # fmt: skip
            raise Diverged(f"the record at offset {pos} claims {size} bytes")
        if have >= _PHYS_END and (stored := _long(buf, at + _PHYS)) != pos:
            raise Diverged(f"the record at offset {pos} says it lies at {stored}: it is "
                           "from another history")  # fmt: skip
        return size

    def _whole(self, pos: int) -> tuple[int, Published]:
        """How many bytes of ``pending`` (which starts at ``pos``, a record start) are whole
        records of one file, and what they bring (store times, queue offsets)."""
        with memoryview(self.pending) as view:  # released before ``pending`` is cut
            return self._walk(pos, view)

    def _walk(self, pos: int, buf: memoryview) -> tuple[int, Published]:
        at, records_end, out = 0, 0, Published()
        while True:  # record headers: how far whole records go
            have = len(buf) - at
            size = self._check(pos + at, buf, at, have)
            if not size or size > have:
                break
            at += size
            if commitlog.peek(buf, at - size).magic == BLANK_MAGIC:
                break  # it ends the file: what follows goes into the next one
            records_end = at
        if records_end:  # every field and body CRC, as recovery checks them, as columns
            cols, good_end, error = decode_columns(buf, 0, records_end, True, pos)
            if error is not None or good_end != records_end:
                raise Diverged(f"the record at offset {pos + good_end} does not check out: "
                               f"{error}")  # fmt: skip
            out.stamps.append((pos + records_end, int(cols.store_timestamp[-1])))
            takes = (cols.sys_flag & commitlog.NO_QUEUE_OFFSET_BIT) == 0
            queues = out.queues
            for topic, queue_id, following in zip(
                cols.topic_id[takes].tolist(), cols.queue_id[takes].tolist(),
                (cols.queue_offset[takes] + 1).tolist(), strict=True,
            ):  # fmt: skip
                key = (cols.topics[topic], queue_id)
                if queues.get(key, 0) < following:
                    queues[key] = following
        return at, out
