"""The dispatch fields of many records at once, from ``commitlog_columns.RecordColumns``.

The rules are those of ``dispatch.py``, applied to whole arrays: each record's consume-queue
tags code, and its index keys (``topic#UNIQ_KEY``, then ``topic#key`` for every non-empty
token of KEYS split at spaces; none for a rollback) as key hashes in the order
``dispatch.index_keys`` lists them. Records of the schedule topic, whose tags code is a
delivery time, go through ``dispatch.tags_code`` one by one.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rmqstore import dispatch
from rmqstore.formats import commitlog
from rmqstore.formats import properties as props_fmt
from rmqstore.formats.commitlog_columns import RecordColumns
from rmqstore.formats.index_file import KEY_SEPARATOR
from rmqstore.formats.javahash import (
    index_hashes,
    index_hashes_of,
    java_hash,
    utf8_span_hashes,
)
from rmqstore.layout import SCHEDULE_TOPIC

_SPACE = ord(" ")


@dataclass(frozen=True)
class DispatchColumns:
    tags_code: np.ndarray  # int64 per record
    goes_to_consume_queue: np.ndarray  # bool per record
    key_record: np.ndarray  # int64: the record of each index key, keys in index order
    key_hash: np.ndarray  # int32: each key's index hash


def key_tokens(blob: np.ndarray, starts: np.ndarray, ends: np.ndarray, owner: np.ndarray):
    """The non-empty space-separated tokens of the spans ``blob[starts[j]:ends[j]]`` (in blob
    order, not overlapping): (start, end, owner of the span) per token, in blob order."""
    if not len(starts):
        return starts, ends, owner
    spaces = np.flatnonzero(blob == _SPACE)
    span = np.searchsorted(starts, spaces, side="right") - 1
    inside = (span >= 0) & (spaces < ends[np.maximum(span, 0)])
    spaces, span = spaces[inside], span[inside]
    # cut points: a virtual space before each span, its spaces, a virtual space at its end;
    # a span begins after a 0x02 and a name, so its first cut lies past the last span's end
    k = np.arange(len(starts))
    cuts = np.concatenate((starts - 1, spaces, ends))
    cut_span = np.concatenate((k, span, k))
    order = np.argsort(cuts, kind="stable")
    cuts, cut_span = cuts[order], cut_span[order]
    begin, stop = cuts[:-1] + 1, cuts[1:]
    keep = (cut_span[:-1] == cut_span[1:]) & (stop > begin)
    return begin[keep], stop[keep], owner[cut_span[:-1][keep]]


def dispatch_columns(cols: RecordColumns) -> DispatchColumns:
    """The dispatch fields of every record of ``cols`` that builders need."""
    segs = props_fmt.segments(cols.properties)  # shared by the three names looked up
    key_record, key_hash = index_keys(cols, segs)
    return DispatchColumns(
        tags_code=tags_codes(cols, segs),
        goes_to_consume_queue=(cols.sys_flag & commitlog.NO_QUEUE_OFFSET_BIT) == 0,
        key_record=key_record,
        key_hash=key_hash,
    )


def tags_codes(cols: RecordColumns, segs: props_fmt.Segments | None = None) -> np.ndarray:
    """Every record's consume-queue tags code (int64); ``segs``: its properties' segments."""
    blob, marks = cols.properties, cols.properties_mark
    tags_at, tags_end = props_fmt.values_in(blob, marks, props_fmt.TAGS, segs)
    tagged = np.flatnonzero(tags_at >= 0)
    codes = np.zeros(len(cols), dtype=np.int64)
    codes[tagged] = (
        utf8_span_hashes(blob, tags_at[tagged], tags_end[tagged]).view(np.int32).astype(np.int64)
    )
    if SCHEDULE_TOPIC in cols.topics:
        for i in np.flatnonzero(cols.topic_id == cols.topics.index(SCHEDULE_TOPIC)).tolist():
            props = props_fmt.parse(cols.properties_of(i))
            codes[i] = dispatch.tags_code(SCHEDULE_TOPIC, props, int(cols.store_timestamp[i]))
    return codes


def index_keys(cols: RecordColumns, segs: props_fmt.Segments | None = None,
               ) -> tuple[np.ndarray, np.ndarray]:
    """The index keys of all records in index order: (the record of each key as int64, its
    index hash as int32); ``segs``: its properties' segments."""
    blob, marks = cols.properties, cols.properties_mark
    segs = segs if segs is not None else props_fmt.segments(blob)
    uniq_at, uniq_end = props_fmt.values_in(blob, marks, props_fmt.UNIQ_KEY, segs)
    keys_at, keys_end = props_fmt.values_in(blob, marks, props_fmt.KEYS, segs)
    return _key_hashes(blob, uniq_at, uniq_end, keys_at, keys_end, cols.topic_id, cols.topics,
                       cols.sys_flag)  # fmt: skip


def index_keys_of_texts(
    topic: list[str],
    uniq_key: Sequence[str],
    keys: Sequence[str],
    sys_flag: np.ndarray,
    columns_from: int = 48,
    distinct_topics: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``index_keys`` of records given as the dispatch record's strings (a builder's batch).

    Below ``columns_from`` records the array work costs more than it saves (about 0.15 ms a
    batch here), so a small batch goes through ``dispatch.index_keys_of`` record by record.
    ``distinct_topics`` gets the batch's topics, each once (found on the way, for free)."""
    n = len(topic)
    if distinct_topics is not None and n < columns_from:
        distinct_topics.extend(dict.fromkeys(topic))
    if n < columns_from:
        flags = sys_flag.tolist()
        per_record = [dispatch.index_keys_of(topic[i], uniq_key[i], keys[i], flags[i])
                      for i in range(n)]  # fmt: skip
        flat = [k for ks in per_record for k in ks]
        record = np.repeat(np.arange(n, dtype=np.int64), [len(ks) for ks in per_record])
        return record, index_hashes(flat) if flat else np.zeros(0, dtype=np.int32)
    parts = [""] * (2 * n)
    parts[0::2], parts[1::2] = uniq_key, keys
    text = "\x02".join(parts)  # any separator: the spans below are what count
    if text.isascii():
        raw, sizes = text.encode("ascii"), np.fromiter(map(len, parts), np.int64, 2 * n)
    else:
        encoded = [p.encode() for p in parts]
        raw, sizes = b"\x02".join(encoded), np.fromiter(map(len, encoded), np.int64, 2 * n)
    at = np.cumsum(sizes + 1) - sizes - 1
    end = at + sizes
    at[sizes == 0] = end[sizes == 0] = -1  # an empty value is none
    ids = {t: i for i, t in enumerate(dict.fromkeys(topic))}  # in order of first appearance
    if distinct_topics is not None:
        distinct_topics.extend(ids)
    topic_id = np.fromiter(map(ids.__getitem__, topic), np.int64, n)
    return _key_hashes(np.frombuffer(raw, dtype=np.uint8), at[0::2], end[0::2], at[1::2],
                       end[1::2], topic_id, list(ids), sys_flag)  # fmt: skip


def _key_hashes(
    text: np.ndarray,
    uniq_at: np.ndarray,
    uniq_end: np.ndarray,
    keys_at: np.ndarray,
    keys_end: np.ndarray,
    topic_id: np.ndarray,
    topics: list[str],
    sys_flag: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Index keys of records whose UNIQ_KEY and KEYS values lie at these spans of ``text``
    (UTF-8; -1 where a record has none; in record order, apart, each after a separator)."""
    tx_type = sys_flag & commitlog.TRANSACTION_TYPE_MASK
    indexed = tx_type != commitlog.TRANSACTION_ROLLBACK_TYPE
    with_uniq = np.flatnonzero(indexed & (uniq_at >= 0))
    with_keys = np.flatnonzero(indexed & (keys_at >= 0))
    tok_at, tok_end, tok_record = key_tokens(text, keys_at[with_keys], keys_end[with_keys],
                                          with_keys)  # fmt: skip
    record = np.concatenate((with_uniq, tok_record))
    starts = np.concatenate((uniq_at[with_uniq], tok_at))
    ends = np.concatenate((uniq_end[with_uniq], tok_end))
    # per record: its UNIQ_KEY first, then its tokens in order
    order = np.argsort(record * 2 + (np.arange(len(record)) >= len(with_uniq)), kind="stable")
    record, starts, ends = record[order], starts[order], ends[order]
    topic_prefix = np.array(
        [java_hash(f"{t}{KEY_SEPARATOR}") & 0xFFFFFFFF for t in topics], dtype=np.uint32
    )
    codes = utf8_span_hashes(text, starts, ends, topic_prefix[topic_id[record]])
    return record, index_hashes_of(codes)


def property_texts(cols: RecordColumns, name: str, segs: props_fmt.Segments | None = None,
                   ) -> list[str]:
    """Every record's value of property ``name`` as ``properties.parse`` reads it, '' where
    it has none (as the dispatch record's ``keys`` and ``uniq_key``); ``segs``: its
    properties' segments."""
    start, end = props_fmt.values_in(cols.properties, cols.properties_mark, name, segs)
    raw = cols.properties.tobytes()
    starts, ends = start.tolist(), end.tolist()
    if raw.isascii():  # byte positions are character positions; -1:-1 slices to ''
        text = raw.decode("ascii")
        return [text[a:b] for a, b in zip(starts, ends, strict=True)]
    return [raw[a:b].decode() for a, b in zip(starts, ends, strict=True)]
