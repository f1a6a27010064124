"""Walking the records of a commitlog segment (record layout: ``commitlog.py``).

A segment holds records back to back from position 0; its data ends at an 8-byte blank
record (the rest of the segment is unused), at zeros (never written), or at the first record
that fails the checks (torn or corrupt: recovery cuts there).
"""

import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike
from rmqstore.formats.commitlog import (
    _INT,
    _SHORT,
    _TAIL,
    BLANK,
    BLANK_MAGIC,
    BODY_LENGTH_AT,
    HEAD,
    HEAD_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TOPIC_BYTES,
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
) -> tuple[int, Blank | None, CorruptRecordError | None]:
    """Where the valid data of a segment ends: (end position, blank marker, first error).

    The checks of ``decode_meta`` (magic, sizes, field lengths, UTF-8 topic and properties,
    body CRC) in one loop without building a record per step: recovery runs this over whole
    segments. A record it doubts is decoded by ``decode_meta`` for the precise error.
    """
    end = len(buf)
    pos = start
    head, tail, short, tail_at = HEAD.unpack_from, _TAIL.unpack_from, _SHORT, TAIL_AT
    magic_v1 = MAGIC_V1
    checksum = crc32
    with memoryview(buf) as view:
        while pos + 8 <= end:
            total, magic = BLANK.unpack_from(view, pos)
            if magic == BLANK_MAGIC:
                return pos, Blank(pos, total), None
            if total == 0 and magic == 0:
                return pos, None, None
            try:
                _, _, crc, _, _, _, _, sys_flag, _ = head(view, pos)
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
                    str(view[p - topic_len : p], "utf-8")
                    str(view[p + 2 : p + 2 + props_len], "utf-8")
            except (struct.error, IndexError, UnicodeDecodeError):
                ok = False
            if not ok:  # v2, or something wrong: the full decoder decides and says why
                try:
                    total = decode_meta(view, pos, check_crc, base_offset).total_size
                except CorruptRecordError as e:
                    return pos, None, e
            pos += total
    return pos, None, None
