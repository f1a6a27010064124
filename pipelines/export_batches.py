"""A range's records as Arrow record batches with the export's columns (``SCHEMA``).

Every value is the one decoding the record alone gives (``commitlog.decode``; properties as
``properties.parse`` reads them, KEYS split as ``records.key_tokens`` splits them), computed
over whole arrays: numbers from ``commitlog_columns``; texts (property names and values, KEYS'
tokens, message ids) as byte spans gathered straight into Arrow's buffers; texts that repeat
(topics, hosts, dates) made once and repeated. No record ever becomes a Python object. A
batch in which some record names a property twice (rare: ``parse`` keeps the first place and
the last value) has its properties made record by record.
"""

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from pipelines.records import DAY_MS, utc_date
from pipelines.source import ByteRange, RangeEnd, iter_range_columns
from rmqstore.dispatch_columns import key_tokens
from rmqstore.formats import BytesLike
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import RecordColumns, record_details
from rmqstore.formats.hosts import Host
from rmqstore.formats.javahash import utf8_span_hashes

ROWS_PER_BATCH = 8192
# a batch's records hold at most this much (or are one record): gathering a batch's texts
# takes an int64 index per byte of them, at most 8 times this
BYTES_PER_BATCH = 16 * 1024 * 1024
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("phy_offset", pa.int64(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("sys_flag", pa.int32(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
    pa.field("born_timestamp", pa.int64(), nullable=False),
    pa.field("store_host", pa.string(), nullable=False),  # ip:port, [v6 groups]:port
    pa.field("born_host", pa.string(), nullable=False),
    pa.field("msg_id", pa.string(), nullable=False),  # the offset message id
    pa.field("keys", pa.list_(pa.string()), nullable=False),  # KEYS' tokens
    pa.field("tags", pa.string()),  # null: none
    pa.field("uniq_key", pa.string()),  # null: none
    pa.field("properties", PROPERTIES_TYPE, nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("body_crc", pa.int32(), nullable=False),
    pa.field("reconsume_times", pa.int32(), nullable=False),
    pa.field("prepared_transaction_offset", pa.int64(), nullable=False),
    pa.field("date", pa.string()),  # UTC date of the store time, yyyy-MM-dd; null: no date
])  # fmt: skip
# the first column of an export of named stores (``--store NAME=PATH,...``): the row's broker
BROKER_FIELD = pa.field("broker", pa.string(), nullable=False)
_NAME_VALUE = ord(props_fmt.NAME_VALUE_SEPARATOR)


def schema(brokers: bool) -> pa.Schema:
    """The export's columns; with ``brokers`` (named stores) ``broker`` first."""
    return pa.schema([BROKER_FIELD, *SCHEMA]) if brokers else SCHEMA


def range_batches(r: ByteRange, check_crc: bool = True, rows: int = ROWS_PER_BATCH,
                  ) -> Iterator[pa.RecordBatch | tuple[RangeEnd, int]]:
    """The range's good records as record batches, then (its RangeEnd, how many records);
    with the range's broker first when it has one (``schema(True)``)."""
    count = 0
    for item in iter_range_columns(r, check_crc, rows):
        if isinstance(item, RangeEnd):
            yield item, count
            return
        cols, buf = item
        count += len(cols)
        ends = np.cumsum(cols.total_size)
        start = 0
        while start < len(cols):  # cut where the bytes would pass BYTES_PER_BATCH
            taken = int(ends[start - 1]) if start else 0
            stop = max(int(np.searchsorted(ends, taken + BYTES_PER_BATCH, "right")), start + 1)
            batch = record_batch(buf, cols.rows(start, stop))
            if r.broker is not None:
                batch = batch.add_column(0, BROKER_FIELD, pa.repeat(r.broker, batch.num_rows))
            yield batch
            start = stop


def record_batch(buf: BytesLike, cols: RecordColumns) -> pa.RecordBatch:
    """The records of ``cols``, read from ``buf``, as one batch of ``SCHEMA``."""
    d = record_details(buf, cols)
    blob, marks = cols.properties, cols.properties_mark
    segs = props_fmt.segments(blob)
    tags = props_fmt.values_in(blob, marks, props_fmt.TAGS, segs)
    uniq = props_fmt.values_in(blob, marks, props_fmt.UNIQ_KEY, segs)
    columns = {
        "topic": pa.array(cols.topics, pa.string()).take(cols.topic_id),
        "queue_id": pa.array(cols.queue_id.astype(np.int32)),
        "queue_offset": pa.array(cols.queue_offset),
        "phy_offset": pa.array(cols.physical_offset),
        "size": pa.array(cols.total_size.astype(np.int32)),
        "sys_flag": pa.array(cols.sys_flag.astype(np.int32)),
        "flag": pa.array(d.flag.astype(np.int32)),
        "store_timestamp": pa.array(cols.store_timestamp),
        "born_timestamp": pa.array(d.born_timestamp),
        "store_host": _host_texts(d.store_host, d.store_v6),
        "born_host": _host_texts(d.born_host, d.born_v6),
        "msg_id": _msg_ids(d.store_host, d.store_v6, cols.physical_offset),
        "keys": _keys(blob, marks, segs),
        "tags": _texts(blob, *tags),
        "uniq_key": _texts(blob, *uniq),
        "properties": _properties(cols, segs),
        "body": _bodies(buf, d.body_at, d.body_length),
        "body_crc": pa.array(d.body_crc.astype(np.int32)),
        "reconsume_times": pa.array(d.reconsume_times.astype(np.int32)),
        "prepared_transaction_offset": pa.array(cols.prepared_transaction_offset),
        "date": _dates(cols.store_timestamp),
    }
    assert list(columns) == SCHEMA.names
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=SCHEMA)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """Arrow's offsets (int32) of values of these lengths."""
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return out


def _texts(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> pa.Array:
    """The UTF-8 spans ``data[start[i]:end[i]]`` as strings; null where ``start`` is -1."""
    n = len(start)
    missing = start < 0
    lengths = np.where(missing, 0, end - start)
    offsets = _offsets(lengths)
    index = np.repeat(start - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    nulls = int(missing.sum())
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data[index])], nulls
    )


def _repeated(texts: Sequence[str | None], which: np.ndarray) -> pa.Array:
    """``texts[which[i]]`` for every i."""
    return pa.array(texts, pa.string()).take(pa.array(which))


def _dates(store_timestamp: np.ndarray) -> pa.Array:
    days, which = np.unique(store_timestamp // DAY_MS, return_inverse=True)
    return _repeated([utc_date(int(day) * DAY_MS) for day in days.tolist()], which.reshape(-1))


def _host_texts(rows: np.ndarray, v6: np.ndarray) -> pa.Array:
    """Hosts (``commitlog_columns.RecordDetails`` rows) as ``ip:port`` texts."""
    keyed = np.zeros((len(rows), rows.itemsize + 1), dtype=np.uint8)
    keyed[:, :-1] = rows.view(np.uint8).reshape(len(rows), rows.itemsize)
    keyed[:, -1] = v6
    distinct, which = np.unique(keyed.view(f"V{keyed.shape[1]}").reshape(-1),
                                return_inverse=True)  # fmt: skip
    texts = []
    for row in distinct.tolist():
        ip_size = 16 if row[-1] else 4
        texts.append(str(Host(row[:ip_size], int.from_bytes(row[ip_size : ip_size + 4], "big",
                                                            signed=True))))  # fmt: skip
    return _repeated(texts, which.reshape(-1))


def _msg_ids(hosts: np.ndarray, v6: np.ndarray, phy: np.ndarray) -> pa.Array:
    """Offset message ids (``msgid.offset_msg_id``): hex of the store host and offset."""
    host_bytes = hosts.view(np.uint8).reshape(len(hosts), hosts.itemsize)
    parts, order = [], []
    for is_v6, size in ((False, 8), (True, 20)):
        rows = np.flatnonzero(v6 == is_v6)
        if not len(rows):
            continue
        raw = np.empty((len(rows), size + 8), dtype=np.uint8)
        raw[:, :size] = host_bytes[rows, :size]
        raw[:, size:] = phy[rows].astype(">i8").view(np.uint8).reshape(len(rows), 8)
        text = raw.tobytes().hex().upper().encode("ascii")
        offsets = np.arange(len(rows) + 1, dtype=np.int32) * (2 * raw.shape[1])
        parts.append(pa.Array.from_buffers(
            pa.string(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(text)]))
        order.append(rows)
    if len(parts) == 1:
        return parts[0]
    place = np.empty(len(hosts), dtype=np.int64)  # where each record's id is in the parts
    place[np.concatenate(order)] = np.arange(len(hosts))
    return pa.concat_arrays(parts).take(pa.array(place))


def _keys(blob: np.ndarray, marks: np.ndarray, segs: props_fmt.Segments) -> pa.Array:
    """KEYS' non-empty space-separated tokens, a list per record."""
    at, end = props_fmt.values_in(blob, marks, props_fmt.KEYS, segs)
    owners = np.flatnonzero(at >= 0)
    start, stop, owner = key_tokens(blob, at[owners], end[owners], owners)
    offsets = _offsets(np.bincount(owner, minlength=len(marks)))
    return pa.ListArray.from_arrays(pa.array(offsets), _texts(blob, start, stop))


def _properties(cols: RecordColumns, segs: props_fmt.Segments) -> pa.Array:
    """Each record's properties as ``properties.parse`` reads them, as one map."""
    blob, marks = cols.properties, cols.properties_mark
    seps, starts, ends = segs
    ones = np.flatnonzero(blob == _NAME_VALUE)
    first = np.searchsorted(ones, starts)  # the first 0x01 at or after each segment's start
    has = first < len(ones)
    sep = np.where(has, ones[np.minimum(first, len(ones) - 1)] if len(ones) else 0, -1)
    # a segment counts with a 0x01 inside it, a name before it and a value after it
    counts = np.flatnonzero(has & (sep > starts) & (sep + 1 < ends))
    record = np.searchsorted(marks, seps[counts], side="right") - 1
    name_at, name_end = starts[counts], sep[counts]
    names = utf8_span_hashes(blob, name_at, name_end).astype(np.int64)
    if len(np.unique(record << 32 | names)) < len(counts):  # a name twice (or a hash) in a record
        return pa.array([list(props_fmt.parse(cols.properties_of(i)).items())
                         for i in range(len(cols))], PROPERTIES_TYPE)  # fmt: skip
    offsets = _offsets(np.bincount(record, minlength=len(marks)))
    return pa.MapArray.from_arrays(
        pa.array(offsets), _texts(blob, name_at, name_end), _texts(blob, name_end + 1, ends[counts])
    )


def _bodies(buf: BytesLike, at: np.ndarray, length: np.ndarray) -> pa.Array:
    with memoryview(buf) as view:
        starts = at.tolist()
        data = b"".join(map(view.__getitem__, map(slice, starts, (at + length).tolist())))
    return pa.Array.from_buffers(
        pa.binary(), len(at), [None, pa.py_buffer(_offsets(length)), pa.py_buffer(data)]
    )
