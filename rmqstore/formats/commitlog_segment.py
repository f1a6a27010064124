"""Walking the records of a commitlog segment (record layout: ``commitlog.py``).

A segment holds records back to back from position 0; its data ends at an 8-byte blank
record (the rest of the segment is unused), at zeros (never written), or at the first record
that fails the checks (torn or corrupt: recovery cuts there).
"""

import mmap
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike
from rmqstore.formats.commitlog import (
    _INT,
    _LONG,
    _SHORT,
    _TAIL,
    BLANK,
    BLANK_MAGIC,
    BODY_LENGTH_AT,
    HEAD,
    HEAD_SIZE,
    MAGIC_AT,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TOPIC_BYTES,
    NO_QUEUE_OFFSET_BIT,
    PHYSICAL_OFFSET_AT,
    TAIL_AT,
    V6_BITS,
    crc32,
    decode,
    decode_meta,
)


class RecordHead(NamedTuple):
    """The fields of a record that locate it in its queue, read without decoding the rest."""

    position: int
    size: int
    queue_id: int
    queue_offset: int
    sys_flag: int
    topic: str


def iter_heads(
    buf: BytesLike,
    start: int = 0,
    end: int | None = None,
    base_offset: int = 0,
):
    """Walk records by their lengths only (no CRC, no properties) until a blank or zeros.

    Raises CorruptRecordError where the walk cannot continue.
    """
    end = len(buf) if end is None else end
    pos = start
    unpack, unpack_int, new = HEAD.unpack_from, _INT.unpack_from, tuple.__new__
    body_length_at = BODY_LENGTH_AT
    topics: dict[bytes, str] = {}
    with memoryview(buf) as view:
        while pos + HEAD_SIZE <= end:
            total, magic, _crc, qid, _flag, qo, _phy, sys_flag, _born = unpack(view, pos)
            if magic == BLANK_MAGIC or (magic == 0 and total == 0):
                return
            if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0 or pos + total > end:
                raise CorruptRecordError(
                    f"bad record header (size {total}, magic {magic & 0xFFFFFFFF:#010x})",
                    base_offset + pos,
                    total,
                )
            p = pos + body_length_at[sys_flag & V6_BITS]
            if p + 4 > pos + total:
                raise CorruptRecordError("record lengths do not add up", base_offset + pos, total)
            (body_len,) = unpack_int(view, p)
            p += 4 + body_len
            if body_len < 0 or p + 2 > pos + total:
                raise CorruptRecordError("record lengths do not add up", base_offset + pos, total)
            if magic == MAGIC_V1:
                topic_len = view[p]
                p += 1
            else:
                (topic_len,) = _SHORT.unpack_from(view, p)
                p += 2
            if p + topic_len > pos + total:
                raise CorruptRecordError("record lengths do not add up", base_offset + pos, total)
            raw = view[p : p + topic_len].tobytes()
            topic = topics.get(raw)
            if topic is None:
                topic = raw.decode()
                if len(topics) < 100_000:
                    topics[raw] = topic
            yield new(RecordHead, (pos, total, qid, qo, sys_flag, topic))
            pos += total


class QueueTally:
    """What the records added take of their queues: the next queue offset per (topic, queue
    id) (a record with NO_QUEUE_OFFSET_BIT takes none) and the last record's position.
    ``scan_end`` adds the records from position ``count_from`` on."""

    def __init__(self, count_from: int = 0) -> None:
        self.count_from = count_from
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.last_position: int | None = None

    def add(self, pos: int, topic: str, queue_id: int, queue_offset: int, sys_flag: int) -> None:
        self.last_position = pos
        if not sys_flag & NO_QUEUE_OFFSET_BIT:
            key = (topic, queue_id)
            if self.next_offsets.get(key, 0) <= queue_offset:
                self.next_offsets[key] = queue_offset + 1


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
) -> tuple[int, Blank | None, CorruptRecordError | None]:
    """Where the valid data of a segment ends: (end position, blank marker, first error).

    The checks of ``decode_meta`` (magic, sizes, field lengths, UTF-8 topic and properties,
    body CRC) in one loop without building a record per step: recovery runs this over whole
    segments. A record it doubts is decoded by ``decode_meta`` for the precise error. Each
    valid record is also added to ``tally`` when one is given, so recovery reads the checked
    segments once for both.
    """
    end = len(buf)
    pos = start
    head, tail, short, tail_at = HEAD.unpack_from, _TAIL.unpack_from, _SHORT, TAIL_AT
    magic_v1 = MAGIC_V1
    checksum = crc32
    add = None if tally is None else tally.add
    count_from = end if tally is None else tally.count_from
    with memoryview(buf) as view:
        while pos + 8 <= end:
            total, magic = BLANK.unpack_from(view, pos)
            if magic == BLANK_MAGIC:
                return pos, Blank(pos, total), None
            if total == 0 and magic == 0:
                return pos, None, None
            try:
                _, _, crc, qid, _, qo, _, sys_flag, _ = head(view, pos)
                p = pos + tail_at[sys_flag & V6_BITS]
                _, _, body_len = tail(view, p)
                body_at = p + _TAIL.size
                p = body_at + body_len
                topic_len = view[p]
                p += 1 + topic_len
                (props_len,) = short.unpack_from(view, p)
                ok = (
                    magic == magic_v1
                    and 0 < total <= end - pos
                    and body_len >= 0
                    and topic_len <= MAX_TOPIC_BYTES
                    and props_len >= 0
                    and p + 2 + props_len - pos == total
                    and (
                        not check_crc
                        or checksum(view[body_at : body_at + body_len]) & 0x7FFFFFFF == crc
                    )
                )
                if ok:
                    topic = str(view[p - topic_len : p], "utf-8")
                    str(view[p + 2 : p + 2 + props_len], "utf-8")
            except (struct.error, IndexError, UnicodeDecodeError):
                ok = False
            if not ok:  # v2, or something wrong: the full decoder decides and says why
                try:
                    meta = decode_meta(view, pos, check_crc, base_offset)
                except CorruptRecordError as e:
                    return pos, None, e
                total, qid, qo, sys_flag, topic = (
                    meta.total_size, meta.queue_id, meta.queue_offset, meta.sys_flag, meta.topic
                )
            if add is not None and pos >= count_from:
                add(pos, topic, qid, qo, sys_flag)
            pos += total
    return pos, None, None


_PREFIX_V1_V2 = _INT.pack(MAGIC_V1)[:3]  # the two record magics differ in their last byte only
_MAGICS = frozenset((MAGIC_V1, MAGIC_V2))


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
        if magic in _MAGICS and 0 < total <= size - pos and \
                _LONG.unpack_from(buf, pos + PHYSICAL_OFFSET_AT)[0] == base_offset + pos:
            return pos
        at = hit + 1
