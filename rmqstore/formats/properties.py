"""Message properties string: ``name 0x01 value 0x02 name 0x01 value`` (RocketMQ 4.9).

No trailing 0x02. Serialization order is Java ``HashMap`` iteration order, which RocketMQ's
broker always re-serializes into: entries sorted stably by bucket, where
``bucket = (h ^ (h >>> 16)) & (capacity - 1)`` and the capacity (16, doubling past 3/4 full)
depends on the largest size the map ever reached.

``joined`` and ``values_in`` read one property of many records at once, as ``parse`` would.
"""

import functools
import itertools
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np

from rmqstore.formats import byte_windows
from rmqstore.formats.javahash import java_hash

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_LENGTH = 32767

KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
WAIT = "WAIT"
CLUSTER = "CLUSTER"
BORN_HOST = "__BORNHOST"  # a producer's own name for its host (RocketMQ 5 clients)
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"


def hashmap_capacity(max_size: int, initial: int = 16) -> int:
    cap = initial
    while max_size > cap * 3 // 4:
        cap <<= 1
    return cap


@functools.lru_cache(maxsize=4096)
def _bucket(name: str, cap: int) -> int:
    h = java_hash(name) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (cap - 1)


def hashmap_order(names: Iterable[str], max_size: int | None = None) -> list[str]:
    """Java HashMap iteration order of distinct names given in first-insertion order."""
    names = list(names)
    cap = hashmap_capacity(max(len(names), max_size or 0))
    return sorted(names, key=lambda k: _bucket(k, cap))  # sorted() is stable


def encode(props: Mapping[str, str], max_size: int | None = None) -> str:
    """Serialize in HashMap order; ``props`` iterates in insertion order."""
    if not props:
        return ""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{props[k]}" for k in hashmap_order(props, max_size)
    )


def parse(s: str) -> dict[str, str]:
    """RocketMQ's ``string2messageProperties``, quirks included.

    A segment between 0x02 separators counts only if it has at least 3 characters and a
    0x01 with a non-empty name before it and a non-empty value after it; a later duplicate
    name overwrites an earlier one.
    """
    out: dict[str, str] = {}
    for segment in s.split(PROPERTY_SEPARATOR):
        if len(segment) >= 3:
            name, sep, value = segment.partition(NAME_VALUE_SEPARATOR)
            if sep and name and value:
                out[name] = value
    return out


def has_separator(s: str) -> bool:
    return NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s


_SEPARATOR_BYTE = ord(PROPERTY_SEPARATOR)


def joined(parts: Iterable[bytes | memoryview],
           lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Many records' UTF-8 properties (``lengths`` bytes each) back to back, each after a 0x02
    so that it begins a segment: (the bytes, where each record's 0x02 is)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if not len(lengths):
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64)
    blob = PROPERTY_SEPARATOR.encode().join(itertools.chain((b"",), parts))  # one copy
    marks = np.cumsum(lengths + 1) - lengths - 1
    if len(blob) != int(marks[-1] + lengths[-1] + 1):
        raise ValueError("properties parts do not have the lengths given")
    return np.frombuffer(blob, dtype=np.uint8), marks


class Segments(NamedTuple):
    """The segments of a ``joined`` blob: the 0x02 before each, where each begins and ends."""

    seps: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def segments(blob: np.ndarray) -> Segments:
    """A blob's segments, for ``values_in`` to share among the names it looks up."""
    seps = np.flatnonzero(blob == _SEPARATOR_BYTE)
    return Segments(seps, seps + 1, np.append(seps[1:], len(blob)))


def values_in(blob: np.ndarray, marks: np.ndarray, name: str,
              segs: Segments | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where ``parse`` finds ``name``'s value in every record of a ``joined`` blob: (start,
    end) in the blob per record, both -1 where it has none. ``segs``: ``segments(blob)``.

    A segment counts if it is ``name 0x01 value`` with a non-empty value (the first 0x01 ends
    the name); a later one overwrites an earlier one. UTF-8 never puts 0x01 or 0x02 inside a
    character, so this reads the bytes as ``parse`` reads the decoded string.
    """
    want = (name + NAME_VALUE_SEPARATOR).encode()
    seps, seg_starts, seg_ends = segs if segs is not None else segments(blob)
    found = np.flatnonzero(seg_ends - seg_starts > len(want))  # name, 0x01, a value byte
    if len(found):  # each candidate's first bytes compared at once, as one value each
        found = found[byte_windows(blob, len(want))[seg_starts[found]] == np.void(want)]
    found = found[::-1]  # newest first, so np.unique keeps the last
    record = np.searchsorted(marks, seps[found], side="right") - 1
    records, first = np.unique(record, return_index=True)
    start = np.full(len(marks), -1, dtype=np.int64)
    end = np.full(len(marks), -1, dtype=np.int64)
    start[records] = seg_starts[found[first]] + len(want)
    end[records] = seg_ends[found[first]]
    return start, end
