"""Walking the records of a commitlog segment (record layout: ``commitlog.py``).

A segment holds records back to back from position 0; its data ends at an 8-byte blank
record (the rest of the segment is unused), at zeros (never written), or at the first record
that fails the checks (torn or corrupt: recovery cuts there).
"""

import mmap
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike
from rmqstore.formats.commitlog import (
    _INT,
    _LONG,
    BLANK,
    BLANK_MAGIC,
    MAGIC_AT,
    MAGIC_V1,
    MAGICS,
    NO_QUEUE_OFFSET_BIT,
    PHYSICAL_OFFSET_AT,
    decode,
)
from rmqstore.formats.commitlog_columns import RecordColumns, decode_columns

SCAN_CHUNK = 65_536  # records ``scan_end`` checks at a time (their columns: about 10 MB)


class QueueTally:
    """What the records added take of their queues: the next queue offset per (topic, queue
    id) (a record with NO_QUEUE_OFFSET_BIT takes none) and the last record's position.
    ``scan_end`` adds the records from position ``count_from`` on."""

    def __init__(self, count_from: int = 0) -> None:
        self.count_from = count_from
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.last_position: int | None = None

    def add(self, cols: RecordColumns) -> None:
        """Add every record of ``cols`` from ``count_from`` on."""
        mine = np.flatnonzero(cols.position >= self.count_from)
        if not len(mine):
            return
        self.last_position = int(cols.position[mine[-1]])
        takes = mine[(cols.sys_flag[mine] & NO_QUEUE_OFFSET_BIT) == 0]
        topic, queue, offset = cols.topic_id[takes], cols.queue_id[takes], cols.queue_offset[takes]
        order = np.lexsort((offset, queue, topic))  # each queue's highest offset comes last
        topic, queue, offset = topic[order], queue[order], offset[order]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (topic[1:] != topic[:-1]) | (queue[1:] != queue[:-1])
        for t, q, o in zip(topic[last].tolist(), queue[last].tolist(), offset[last].tolist(),
                           strict=True):
            key = (cols.topics[t], q)
            if self.next_offsets.get(key, 0) <= o:
                self.next_offsets[key] = o + 1


class Blank(NamedTuple):
    """The end-of-segment marker found at ``position`` within a segment."""

    position: int
    declared_size: int


def iter_segment(
    buf: BytesLike,
    start: int = 0,
    limit: int | None = None,
    check_crc: bool = True,
    base_offset: int = 0,
    decoder: Callable[..., Any] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Yield (position, Record) then stop at a blank record, zeros or the limit.

    ``decoder=decode_meta`` yields RecordMeta instead (no body copy). A corrupt record raises
    CorruptRecordError carrying its offset (base_offset + position), after every good record
    before it was yielded.
    """
    decode_one = decode if decoder is None else decoder
    end = len(buf) if limit is None else limit
    pos = start
    while pos + 8 <= end:
        size, magic = BLANK.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            return
        if size == 0 and magic == 0:
            return
        rec = decode_one(buf, pos, check_crc, base_offset)
        yield pos, rec
        pos += rec.total_size


def scan_end(
    buf: BytesLike,
    start: int = 0,
    check_crc: bool = True,
    base_offset: int = 0,
    tally: QueueTally | None = None,
    limit: int | None = None,
) -> tuple[int, Blank | None, CorruptRecordError | None]:
    """Where the valid data of a segment ends: (end position, blank marker, first error).
    With ``limit``, only records starting before it are read.

    The checks of ``decode_meta`` (magic, sizes, field lengths, UTF-8 topic and properties,
    body CRC), made over ``SCAN_CHUNK`` records at a time as columns
    (``commitlog_columns.decode_columns``): recovery runs this over whole segments. The first
    record that fails is decoded by ``decode_meta`` for the precise error. Each valid record is
    also added to ``tally`` when one is given, so recovery reads the checked segments once for
    both.
    """
    pos = start
    while True:
        cols, pos, error = decode_columns(buf, pos, limit, check_crc, base_offset, SCAN_CHUNK)
        if tally is not None:
            tally.add(cols)
        if error is not None:
            return pos, None, error
        if len(cols) < SCAN_CHUNK:
            break
    if pos + BLANK.size <= len(buf):
        total, magic = BLANK.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            return pos, Blank(pos, total), None
    return pos, None, None


_PREFIX_V1_V2 = _INT.pack(MAGIC_V1)[:3]  # the two record magics differ in their last byte only


def find_record(buf: bytes | mmap.mmap, start: int, stop: int, base_offset: int) -> int | None:
    """The first position in [start, stop) of ``buf`` (a whole segment) where a record
    vouches for its own place: a v1 or v2 magic, a positive size that fits, and a physical
    offset field equal to ``base_offset`` + the position (every record stores its own
    offset). None if nothing in the window does. Bytes inside a body pass only if they copy a
    header naming exactly where they lie, so a find is a strong guess, not proof: only a walk
    from the segment's start proves where records start."""
    size = len(buf)
    last = min(stop - 1, size - PHYSICAL_OFFSET_AT - 8)  # the last position to try
    at = start + MAGIC_AT
    while True:
        hit = buf.find(_PREFIX_V1_V2, at, last + MAGIC_AT + len(_PREFIX_V1_V2))
        if hit < 0:
            return None
        pos = hit - MAGIC_AT
        total, magic = BLANK.unpack_from(buf, pos)
        if magic in MAGICS and 0 < total <= size - pos and \
                _LONG.unpack_from(buf, pos + PHYSICAL_OFFSET_AT)[0] == base_offset + pos:
            return pos
        at = hit + 1
