"""Commitlog record (RocketMQ 4.9 ``MessageDecoder`` layout, magic v1; v2 is read too).

Big-endian. Offsets for IPv4 born and store hosts; each IPv6 host shifts what follows by 12.
┌────┬──────────────────────────────┐
│  0 │ total size (int32)           │ whole record, this field included
│  4 │ magic (int32)                │ 0xDAA320A7 v1 (1-byte topic length), 0xDAA320AB v2
│  8 │ body CRC (int32)             │ zlib CRC-32 of the body with bit 31 cleared
│ 12 │ queue id (int32)             │
│ 16 │ flag (int32)                 │ producer flag
│ 20 │ queue offset (int64)         │ index in the consume queue
│ 28 │ physical offset (int64)      │ commitlog byte offset of this record
│ 36 │ sys flag (int32)             │ compressed / tx type / IPv6 bits
│ 40 │ born timestamp (int64)       │
│ 48 │ born host (4+4 or 16+4)      │
│ 56 │ store timestamp (int64)      │
│ 64 │ store host (4+4 or 16+4)     │
│ 72 │ reconsume times (int32)      │
│ 76 │ prepared tx offset (int64)   │
│ 84 │ body length (int32) + body   │
│    │ topic length (int8|int16)+topic (UTF-8)
│    │ properties length (int16) + properties (UTF-8, see properties.py)
└────┴──────────────────────────────┘
End of segment: when a record does not fit with 8 bytes to spare, an 8-byte blank record
``[int32 bytes left in the segment][int32 0xCBD43194]`` is written and the rest left as is.
"""

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.hosts import Host

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK = struct.Struct(">ii")  # bytes left in the segment, BLANK_MAGIC
BLANK_SIZE = BLANK.size  # 8: every segment keeps room for it

# total size, magic, body crc, queue id, flag, queue offset, physical offset, sys flag, born ts
HEAD = struct.Struct(">iiiiiqqiq")
HEAD_SIZE = HEAD.size  # 48, the born host follows
TOTAL_SIZE_AT = 0
MAGIC_AT = 4
QUEUE_OFFSET_AT = 20
PHYSICAL_OFFSET_AT = 28
SYS_FLAG_AT = 36
MAGICS = frozenset((MAGIC_V1, MAGIC_V2))
# a record's total size, magic and physical offset, read at once
RECORD_HEAD = struct.Struct(f">ii{PHYSICAL_OFFSET_AT - 8}xq")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot paths)
_TAIL = struct.Struct(">iqi")  # reconsume times, prepared tx offset, body length
# body length sits at this + both host lengths: head, store timestamp, reconsume, prepared tx
BODY_LENGTH_BASE = HEAD_SIZE + 8 + 4 + 8  # 68

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
# prepared (0x4) and rollback (0xC) records, and only they, have this bit: they take no queue
# offset (stored with 0, the counter does not move) and no consume-queue unit
NO_QUEUE_OFFSET_BIT = TRANSACTION_PREPARED_TYPE
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
# how a compressed body was compressed (4.9's clients: 0x300, zlib, with COMPRESSED_FLAG)
COMPRESSION_TYPE_MASK = 0x700

MAX_TOPIC_BYTES = 127
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024


try:  # the same CRC-32 as zlib's, with SIMD: 52 ns for a 1 KiB body here against 356 ns
    from isal.isal_zlib import crc32
except ImportError:  # a platform without an isal wheel
    from zlib import crc32


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's BODYCRC: CRC-32 with the top bit cleared."""
    return crc32(body) & 0x7FFFFFFF


def host_len(sys_flag: int, flag_bit: int) -> int:
    return 20 if sys_flag & flag_bit else 8


V6_BITS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
# where _TAIL (reconsume times, prepared tx offset, body length) starts, by the sys flag's
# host bits (``TAIL_AT[sys_flag & V6_BITS]``): per-record loops look it up
TAIL_AT = {
    bits: BODY_LENGTH_BASE - 12 + host_len(bits, BORNHOST_V6_FLAG)
    + host_len(bits, STOREHOST_V6_FLAG)
    for bits in (0, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, V6_BITS)
}
BODY_LENGTH_AT = {bits: at + _TAIL.size - _INT.size for bits, at in TAIL_AT.items()}  # last


def store_timestamp_at(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP inside a record with this sys flag."""
    return HEAD_SIZE + host_len(sys_flag, BORNHOST_V6_FLAG)


def record_size(
    body_len: int, topic_len: int, props_len: int, sys_flag: int = 0, magic: int = MAGIC_V1
) -> int:
    """``calMsgLength``: 91 + body + topic + properties for v1 with IPv4 hosts."""
    return (
        HEAD_SIZE
        + host_len(sys_flag, BORNHOST_V6_FLAG)
        + 8
        + host_len(sys_flag, STOREHOST_V6_FLAG)
        + 4
        + 8
        + 4
        + max(body_len, 0)
        + (1 if magic == MAGIC_V1 else 2)
        + topic_len
        + 2
        + max(props_len, 0)
    )


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


@dataclass(slots=True)
class Record:
    """One decoded commitlog record. ``properties`` is the exact string stored."""

    topic: str
    queue_id: int
    body: bytes
    properties: str = ""
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = Host(b"\x7f\x00\x00\x01", 0)
    store_timestamp: int = 0
    store_host: Host = Host(b"\x7f\x00\x00\x01", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int = 0
    total_size: int = 0
    magic: int = MAGIC_V1
    _props: dict[str, str] | None = field(default=None, repr=False)

    @property
    def property_map(self) -> dict[str, str]:
        if self._props is None:
            self._props = props_fmt.parse(self.properties)
        return self._props

    @property
    def keys(self) -> str:
        return self.property_map.get(props_fmt.KEYS, "")

    @property
    def tags(self) -> str:
        return self.property_map.get(props_fmt.TAGS, "")

    @property
    def uniq_key(self) -> str:
        return self.property_map.get(props_fmt.UNIQ_KEY, "")


def _fixed_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    """Everything from TOTALSIZE through BODYLENGTH as one struct."""
    b, st = ("16s" if born_v6 else "4s"), ("16s" if store_v6 else "4s")
    return struct.Struct(f">iiiiiqqiq{b}iq{st}iiqi")


_FIXED = {(bv6, sv6): _fixed_struct(bv6, sv6) for bv6 in (False, True) for sv6 in (False, True)}


def encode_parts(
    topic: bytes,
    queue_id: int,
    body: bytes,
    properties: bytes,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: Host,
    store_host: Host,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
) -> bytes:
    """Encode a v1 record from already-encoded topic and properties.

    The v6 bits of ``sys_flag`` are set from the hosts; the size and CRC are computed. The
    record is assembled by ``commitlog_batch`` (the writer's batch path), so there is one
    assembly of the layout above.
    """
    from rmqstore.formats.commitlog_batch import encoder_for  # it builds on this module

    enc = encoder_for(store_host)
    record = enc.prepare(
        topic, queue_id, body, properties, flag, sys_flag, born_timestamp, born_host,
        reconsume_times, prepared_transaction_offset,
    )  # fmt: skip
    return enc.encode((record,), (queue_offset,), (physical_offset,), store_timestamp)


def encode(r: Record) -> bytes:
    """Encode a record; ``total_size`` and ``body_crc`` are computed, the v6 bits set."""
    return encode_parts(
        r.topic.encode(),
        r.queue_id,
        r.body,
        r.properties.encode(),
        r.flag,
        r.sys_flag,
        r.born_timestamp,
        r.born_host,
        r.store_host,
        r.reconsume_times,
        r.prepared_transaction_offset,
        r.queue_offset,
        r.physical_offset,
        r.store_timestamp,
    )


def patch(
    buf: bytearray | memoryview,
    at: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    sys_flag: int,
) -> None:
    """Fill the fields the writer assigns under its append lock, in place."""
    _LONG.pack_into(buf, at + QUEUE_OFFSET_AT, queue_offset)
    _LONG.pack_into(buf, at + PHYSICAL_OFFSET_AT, physical_offset)
    _LONG.pack_into(buf, at + store_timestamp_at(sys_flag), store_timestamp)


class Header(NamedTuple):
    total_size: int
    magic: int


def peek(buf: BytesLike, at: int = 0) -> Header:
    """Total size and magic at ``at``; raises CorruptRecordError if fewer than 8 bytes."""
    if len(buf) - at < 8:
        raise CorruptRecordError("fewer than 8 bytes left for a record header", at)
    size, magic = BLANK.unpack_from(buf, at)
    return Header(size, magic)


def blank(bytes_left: int) -> bytes:
    return BLANK.pack(bytes_left, BLANK_MAGIC)


class RecordMeta(NamedTuple):
    """What dispatch needs of a record: everything but the body and the hosts."""

    total_size: int
    queue_id: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    store_timestamp: int
    prepared_transaction_offset: int
    topic: str
    properties: str
    body_at: int  # position of the body in the buffer
    body_len: int
    body_crc: int


def decode_meta(
    buf: BytesLike,
    at: int = 0,
    check_crc: bool = True,
    base_offset: int | None = None,
) -> RecordMeta:
    """Check the record at ``buf[at]`` as RocketMQ does (magic, lengths, size, optional CRC)
    and return its dispatch fields without copying the body."""
    where = at if base_offset is None else base_offset + at
    end = len(buf)
    try:
        (total, magic, crc, queue_id, _flag, queue_offset, phy, sys_flag, _born_ts) = (
            HEAD.unpack_from(buf, at)
        )
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise CorruptRecordError(f"illegal magic code {magic & 0xFFFFFFFF:#010x}", where)
        if total <= 0 or at + total > end:
            raise CorruptRecordError(
                f"record size {total} runs past the data ({end - at} bytes left)", where, total
            )
        (store_ts,) = _LONG.unpack_from(buf, at + store_timestamp_at(sys_flag))
        p = at + TAIL_AT[sys_flag & V6_BITS]
        _reconsume, prep_tx, body_len = _TAIL.unpack_from(buf, p)
        p += _TAIL.size
        if body_len < 0 or p + body_len > at + total:
            raise CorruptRecordError(f"body length {body_len} does not fit", where, total)
        body_at = p
        p += body_len
        if magic == MAGIC_V1:
            topic_len = buf[p]
            topic_len = topic_len - 256 if topic_len > 127 else topic_len
            p += 1
        else:
            (topic_len,) = _SHORT.unpack_from(buf, p)
            p += 2
        if topic_len < 0:
            raise CorruptRecordError(f"negative topic length {topic_len}", where, total)
        topic = str(buf[p : p + topic_len], "utf-8")
        p += topic_len
        (props_len,) = _SHORT.unpack_from(buf, p)
        p += 2
        if props_len < 0:
            raise CorruptRecordError(f"negative properties length {props_len}", where, total)
        properties = str(buf[p : p + props_len], "utf-8")
        p += props_len
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"truncated or garbled record: {e}", where) from e
    # p walked the fields in layout order, so this is record_size(...) == total
    if p - at != total:
        raise CorruptRecordError(
            f"record size {total} does not match its fields ({p - at})", where, total
        )
    body_ok = not check_crc or body_len == 0 or (
        crc32(buf[body_at : body_at + body_len]) & 0x7FFFFFFF == crc
    )
    if not body_ok:
        raise CorruptRecordError(f"body CRC {crc} does not match the body", where, total)
    return _new_tuple(RecordMeta, (total, queue_id, queue_offset, phy, sys_flag, store_ts,
                                   prep_tx, topic, properties, body_at, body_len, crc))  # fmt: skip


def decode(
    buf: BytesLike,
    at: int = 0,
    check_crc: bool = True,
    base_offset: int | None = None,
) -> Record:
    """Decode the record starting at ``buf[at]`` with every sanity check RocketMQ makes.

    ``base_offset`` (the segment's start offset) names the position in errors.
    """
    m = decode_meta(buf, at, check_crc, base_offset)
    fixed = _FIXED[(bool(m.sys_flag & BORNHOST_V6_FLAG), bool(m.sys_flag & STOREHOST_V6_FLAG))]
    (_, magic, _, _, flag, _, _, _, born_ts, born_ip, born_port, _, store_ip, store_port,
     reconsume, _, _) = fixed.unpack_from(buf, at)  # fmt: skip
    return Record(  # in field order: much cheaper than by keyword
        m.topic, m.queue_id, bytes(buf[m.body_at : m.body_at + m.body_len]), m.properties, flag,
        m.queue_offset, m.physical_offset, m.sys_flag, born_ts, Host(born_ip, born_port),
        m.store_timestamp, Host(store_ip, store_port), reconsume, m.prepared_transaction_offset,
        m.body_crc, m.total_size, magic,
    )  # fmt: skip


def is_record_at(buf: bytes | memoryview, at: int, offset: int, size: int) -> bool:
    """Whether the ``size`` bytes at ``at`` of ``buf`` (whole) head the record a consume-queue
    unit says is at commitlog ``offset``: its total size, magic and physical offset match
    (only the head is checked; ``RECORD_HEAD``)."""
    if size < HEAD_SIZE:
        return False
    total, magic, phy = RECORD_HEAD.unpack_from(buf, at)
    return total == size and phy == offset and magic in MAGICS
