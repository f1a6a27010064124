"""Many commitlog records at once, as numpy columns (record layout: ``commitlog.py``).

``decode_columns`` walks a segment's records by their sizes, then reads and checks the fields
of all of them with whole-array operations: the checks of ``commitlog.decode_meta`` (magic,
sizes, field lengths adding up, UTF-8 topic and properties, body CRC), with the same outcome
as ``commitlog_segment.iter_segment`` running it record after record. The first record that
fails is handed to ``decode_meta``, which names the error; the records before it are returned.
For work over runs of records (the rebuild and find jobs, the writer's dispatch from files);
one record at a time stays in ``commitlog.py``. ``record_details`` reads the fields the columns
leave out (hosts, body, flag, born time, reconsume times) for the export job.
"""

from dataclasses import dataclass

import numpy as np

from rmqstore.errors import CorruptRecordError
from rmqstore.formats import BytesLike, byte_windows
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog import (
    _TAIL,
    BLANK,
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    HEAD,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOST_V6_FLAG,
    TAIL_AT,
    V6_BITS,
    crc32,
    decode_meta,
    store_timestamp_at,
)


def _dtype_of(fmt: str, names: tuple[str, ...]) -> np.dtype:
    """The numpy record type of a big-endian ``struct`` format (no padding: codes only)."""
    codes = fmt.lstrip(">")
    return np.dtype([(n, ">" + c) for n, c in zip(names, codes, strict=True)])


HEAD_DTYPE = _dtype_of(HEAD.format, ("total_size", "magic", "body_crc", "queue_id", "flag",
                                     "queue_offset", "physical_offset", "sys_flag",
                                     "born_timestamp"))  # fmt: skip
TAIL_DTYPE = _dtype_of(_TAIL.format, ("reconsume_times", "prepared_transaction_offset",
                                      "body_length"))  # fmt: skip
assert HEAD_DTYPE.itemsize == HEAD.size and TAIL_DTYPE.itemsize == _TAIL.size

# by the sys flag's host bits (sys_flag & V6_BITS): where the tail and the store time sit
_TAIL_AT = np.zeros(V6_BITS + 1, dtype=np.int64)
_STORE_AT = np.zeros(V6_BITS + 1, dtype=np.int64)
for _bits, _at in TAIL_AT.items():
    _TAIL_AT[_bits] = _at
    _STORE_AT[_bits] = store_timestamp_at(_bits)
_WIDE_TOPICS = 256  # topics up to this long are told apart as rows of one padded matrix
_PADDING_LIMIT = 4  # properties are read as padded rows while those hold at most 4x their bytes


@dataclass(frozen=True)
class RecordColumns:
    """What dispatch needs of each record (``commitlog.RecordMeta``), one array per field."""

    position: np.ndarray  # int64: where the record starts in the buffer
    total_size: np.ndarray  # int64
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    physical_offset: np.ndarray  # int64
    sys_flag: np.ndarray  # int64
    store_timestamp: np.ndarray  # int64
    prepared_transaction_offset: np.ndarray  # int64
    topic_id: np.ndarray  # int64: the record's topic is topics[topic_id]
    topics: list[str]
    properties: np.ndarray  # uint8: all records' properties, ``properties.joined``
    properties_mark: np.ndarray  # int64: where each record's part of them begins (its 0x02)

    def __len__(self) -> int:
        return len(self.position)

    def topic_of(self, i: int) -> str:
        return self.topics[int(self.topic_id[i])]

    def properties_of(self, i: int) -> str:
        end = self.properties_mark[i + 1] if i + 1 < len(self) else len(self.properties)
        return self.properties[self.properties_mark[i] + 1 : end].tobytes().decode()

    def rows(self, start: int, stop: int) -> "RecordColumns":
        """Records ``start`` to ``stop`` (exclusive) as columns of their own."""
        marks, stop = self.properties_mark, min(stop, len(self))
        start = min(start, stop)
        at = int(marks[start]) if start < len(self) else len(self.properties)
        end = int(marks[stop]) if stop < len(self) else len(self.properties)
        cut = slice(start, stop)
        return RecordColumns(
            self.position[cut], self.total_size[cut], self.queue_id[cut], self.queue_offset[cut],
            self.physical_offset[cut], self.sys_flag[cut], self.store_timestamp[cut],
            self.prepared_transaction_offset[cut], self.topic_id[cut], self.topics,
            self.properties[at:end], marks[cut] - at,
        )  # fmt: skip


def _gather(data: np.ndarray, at: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """The values of ``dtype`` at byte positions ``at``, read through a view of the buffer
    with a stride of one byte (one copy per value, no index per byte). Bytes past the end
    read as zeros: a record's own fields never lie there."""
    dt = np.dtype(dtype)
    at = np.maximum(np.asarray(at, dtype=np.int64), 0)
    size = dt.itemsize
    last = len(data) - size
    if last >= 0:
        out = byte_windows(data, size)[np.minimum(at, last)]
    else:
        out = np.zeros(len(at), dtype=f"V{size}")
    over = np.flatnonzero(at > last)
    if len(over):  # values running past the end: from a copy of the end, zero-padded
        start = min(int(at[over].min()), len(data))
        tail = np.zeros(len(data) - start + size, dtype=np.uint8)
        tail[: len(data) - start] = data[start:]
        out[over] = byte_windows(tail, size)[np.minimum(at[over] - start, len(tail) - size)]
    return out.view(dt)


def walk(
    buf: BytesLike, start: int = 0, end: int | None = None, max_records: int | None = None
) -> tuple[list[int], int | None]:
    """Positions of the records starting before ``end`` (at most ``max_records``), found by
    their sizes alone, up to a blank record or zeros; and where the walk met a header it cannot
    step over (bad magic, a size that is not positive or runs past the buffer;
    ``decode_meta`` says why), if it did."""
    positions: list[int] = []
    append, unpack, size = positions.append, BLANK.unpack_from, len(buf)
    end = size if end is None else end
    room = -1 if max_records is None else max_records
    pos = start
    while pos + 8 <= end and room:
        room -= 1
        total, magic = unpack(buf, pos)
        if magic == BLANK_MAGIC or (total == 0 and magic == 0):
            return positions, None
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or total <= 0 or pos + total > size:
            return positions, pos
        append(pos)
        pos += total
    return positions, None


def _topics(data: np.ndarray, at: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, list]:
    """Topic number per record and the distinct topics' bytes, in order of first appearance."""
    n = len(at)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    width = int(lengths.max())
    if width > _WIDE_TOPICS:  # only a v2 record can say so: one at a time
        ids: dict[bytes, int] = {}
        raw = [bytes(data[a : a + k]) for a, k in zip(at.tolist(), lengths.tolist(), strict=True)]
        number = np.array([ids.setdefault(r, len(ids)) for r in raw], dtype=np.int64)
        return number, list(ids)
    rows = np.zeros((n, width + 2), dtype=np.uint8)  # the length, then the bytes, zero-padded
    rows[:, :2] = lengths.astype(">u2").view(np.uint8).reshape(n, 2)
    if width:
        cols = np.arange(width)
        body = _gather(data, at, f"V{width}").view(np.uint8).reshape(n, width).copy()
        body[cols >= lengths[:, None]] = 0
        rows[:, 2:] = body
    keys = rows.view(f"V{width + 2}").reshape(n)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # number topics by first appearance
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    distinct = [bytes(rows[i, 2 : 2 + int(lengths[i])]) for i in first[order].tolist()]
    return rank[inverse.reshape(-1)], distinct


def _properties(data: np.ndarray, view: memoryview, at: np.ndarray, lengths: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Every record's properties back to back, each after a 0x02 (``properties.joined``):
    read as the rows of one matrix as wide as the longest, unless that is mostly padding."""
    n = len(at)
    width = int(lengths.max()) + 1 if n else 0
    if not n or n * width > _PADDING_LIMIT * (int(lengths.sum()) + n):  # some long: one by one
        begin, size = at.tolist(), lengths.tolist()
        parts = map(view.__getitem__, map(slice, begin, map(int.__add__, begin, size)))
        return props_fmt.joined(parts, lengths)
    rows = _gather(data, at - 1, f"V{width}").view(np.uint8).reshape(n, width)
    rows[:, 0] = ord(props_fmt.PROPERTY_SEPARATOR)  # over the length's low byte
    blob = rows[np.arange(width) <= lengths[:, None]]  # row by row: each 0x02 and its bytes
    return blob, np.cumsum(lengths + 1) - lengths - 1


def _first_bad_utf8(blob: np.ndarray, marks: np.ndarray) -> int:
    """Index of the first record of a ``properties.joined`` blob whose properties are not
    UTF-8, or the number of records. The 0x02 between records is ASCII, so the whole decodes
    exactly when every record's part does."""
    raw = blob.tobytes()
    if raw.isascii():
        return len(marks)
    try:
        raw.decode("utf-8")
        return len(marks)
    except UnicodeDecodeError:
        pass
    ends = [*marks[1:].tolist(), len(raw)]
    for i, (a, b) in enumerate(zip(marks.tolist(), ends, strict=True)):
        try:
            raw[a + 1 : b].decode("utf-8")
        except UnicodeDecodeError:
            return i
    return len(marks)


def decode_columns(
    buf: BytesLike,
    start: int = 0,
    limit: int | None = None,
    check_crc: bool = True,
    base_offset: int = 0,
    max_records: int | None = None,
    positions: list[int] | None = None,
) -> tuple[RecordColumns, int, CorruptRecordError | None]:
    """Every good record from ``start`` until a blank record, zeros, ``limit`` or
    ``max_records``, as columns: (columns, position after the last good record, the error of
    the record that stopped the walk, if one did). ``base_offset`` (the segment's start
    offset) names positions in errors. ``positions``: the records' starts, already found by
    a walk of the caller's (each with a known magic and a size inside the buffer)."""
    with memoryview(buf) as view:
        if positions is None:
            found, stopped_at = walk(view, start, limit, max_records)
        else:
            found, stopped_at = positions, None
        data = np.frombuffer(view, dtype=np.uint8)
        pos = np.array(found, dtype=np.int64)
        head = _gather(data, pos, HEAD_DTYPE)
        total = head["total_size"].astype(np.int64)
        sys_flag = head["sys_flag"].astype(np.int64)
        host_bits = sys_flag & V6_BITS
        tail_at = _TAIL_AT[host_bits]
        tail = _gather(data, pos + tail_at, TAIL_DTYPE)
        body_len = tail["body_length"].astype(np.int64)
        body_at = tail_at + _TAIL.size  # from here on: positions within the record
        topic_len_at = body_at + np.maximum(body_len, 0)
        v2 = head["magic"] == MAGIC_V2
        raw_len = _gather(data, pos + topic_len_at, ">i2").astype(np.int64)
        topic_len = np.where(v2, raw_len, raw_len >> 8)  # v1: the first byte, signed
        topic_at = topic_len_at + np.where(v2, 2, 1)
        props_len_at = topic_at + np.maximum(topic_len, 0)
        props_len = _gather(data, pos + props_len_at, ">i2").astype(np.int64)
        props_at = props_len_at + 2
        ok = (
            (body_len >= 0)
            & (body_at + body_len <= total)
            & (topic_len >= 0)
            & (props_len >= 0)
            & (props_at + props_len == total)  # every field inside the record, none left over
        )
        good = int(np.argmin(ok)) if not ok.all() else len(pos)
        topic_number, distinct = _topics(data, (pos + topic_at)[:good], topic_len[:good])
        topics: list[str] = []
        for number, raw in enumerate(distinct):
            try:
                topics.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                good = min(good, int(np.argmax(topic_number == number)))
                topics.append("")
        blob, marks = _properties(data, view, (pos + props_at)[:good], props_len[:good])
        bad_utf8 = _first_bad_utf8(blob, marks)
        if bad_utf8 < good:
            good = bad_utf8
            blob, marks = blob[: marks[good]], marks[:good]
        if check_crc and good:
            at, size = (pos + body_at)[:good].tolist(), body_len[:good].tolist()
            sums = np.fromiter(
                map(crc32, map(view.__getitem__, map(slice, at, map(int.__add__, at, size)))),
                dtype=np.int64,
                count=good,
            )
            bad = ((sums & 0x7FFFFFFF) != head["body_crc"][:good]) & (body_len[:good] != 0)
            if bad.any():
                good = int(np.argmax(bad))
                blob, marks = blob[: marks[good]], marks[:good]
        error = None
        refused = found[good] if good < len(found) else stopped_at
        if refused is not None:
            try:
                decode_meta(view, refused, check_crc, base_offset)
            except CorruptRecordError as e:
                error = e
            else:
                raise AssertionError(
                    f"record at {base_offset + refused}: the column checks refused a record "
                    "the record decoder accepts"
                )
        cut = slice(0, good)
        columns = RecordColumns(
            position=pos[cut],
            total_size=total[cut],
            queue_id=head["queue_id"][cut].astype(np.int64),
            queue_offset=head["queue_offset"][cut].astype(np.int64),
            physical_offset=head["physical_offset"][cut].astype(np.int64),
            sys_flag=sys_flag[cut],
            store_timestamp=_gather(data, pos[cut] + _STORE_AT[host_bits[cut]], ">i8").astype(
                np.int64
            ),
            prepared_transaction_offset=tail["prepared_transaction_offset"][cut].astype(np.int64),
            topic_id=topic_number[cut],
            topics=topics,
            properties=blob,
            properties_mark=marks,
        )
        end_pos = int(pos[good - 1] + total[good - 1]) if good else start
        del data  # release the buffer's export before the view closes
    return columns, end_pos, error


@dataclass(frozen=True)
class RecordDetails:
    """The fields of records that ``RecordColumns`` leaves out, one array per field. A host
    is a row of 20 bytes: its IP (4 or 16 bytes, as its ``*_v6`` says) and int32 port, then
    zeros."""

    flag: np.ndarray  # int64
    born_timestamp: np.ndarray  # int64
    body_crc: np.ndarray  # int64: as stored
    reconsume_times: np.ndarray  # int64
    body_at: np.ndarray  # int64: where the body starts in the buffer
    body_length: np.ndarray  # int64
    born_host: np.ndarray  # V20
    born_v6: np.ndarray  # bool
    store_host: np.ndarray  # V20
    store_v6: np.ndarray  # bool


def record_details(buf: BytesLike, cols: RecordColumns) -> RecordDetails:
    """The other fields of the records of ``cols``, read from ``buf``, the buffer that
    ``decode_columns`` read them from (and checked)."""
    with memoryview(buf) as view:
        data = np.frombuffer(view, dtype=np.uint8)
        pos = cols.position
        head = _gather(data, pos, HEAD_DTYPE)
        bits = cols.sys_flag & V6_BITS
        tail_at = pos + _TAIL_AT[bits]
        tail = _gather(data, tail_at, TAIL_DTYPE)
        born_v6 = (bits & BORNHOST_V6_FLAG) != 0
        store_v6 = (bits & STOREHOST_V6_FLAG) != 0
        details = RecordDetails(
            flag=head["flag"].astype(np.int64),
            born_timestamp=head["born_timestamp"].astype(np.int64),
            body_crc=head["body_crc"].astype(np.int64),
            reconsume_times=tail["reconsume_times"].astype(np.int64),
            body_at=tail_at + _TAIL.size,
            body_length=tail["body_length"].astype(np.int64),
            born_host=_host_rows(data, pos + HEAD.size, born_v6),
            born_v6=born_v6,
            store_host=_host_rows(data, pos + _STORE_AT[bits] + 8, store_v6),
            store_v6=store_v6,
        )
        del data  # release the buffer's export before the view closes
    return details


_HOST_ROW = 20  # the longest host: a 16-byte IP and an int32 port


def _host_rows(data: np.ndarray, at: np.ndarray, v6: np.ndarray) -> np.ndarray:
    """The hosts at ``at`` as rows of ``_HOST_ROW`` bytes (an IPv4 host's 8, then zeros)."""
    rows = _gather(data, at, f"V{_HOST_ROW}").view(np.uint8).reshape(len(at), _HOST_ROW).copy()
    rows[~v6, 8:] = 0
    return rows.view(f"V{_HOST_ROW}").reshape(len(at))
