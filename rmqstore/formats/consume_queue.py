"""Consume queue: one fixed-size unit per message of a (topic, queue).

┌──────────────────────────┬──────────────┬─────────────────────────┐
│ commitlog offset (int64) │ size (int32) │ tags code (int64)       │
└──────────────────────────┴──────────────┴─────────────────────────┘
Big-endian. Unit n sits at byte n * UNIT_SIZE of the queue's segment set; segment files are
named by their first byte offset and hold ``entries_per_file`` units. Segments are
preallocated, so the first unit with size <= 0 or a negative offset ends the data.
A unit written by RocketMQ's ``fillPreBlank`` is (0, 0x7FFFFFFF, 0).
"""

import functools
import struct
from typing import NamedTuple

import numpy as np

from rmqstore.formats import BytesLike

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
DEFAULT_ENTRIES_PER_FILE = 300_000
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
assert struct.calcsize(">q12x") == struct.calcsize(">8xi8x") == UNIT_SIZE  # column_reads


class CqUnit(NamedTuple):
    commitlog_offset: int
    size: int
    tags_code: int


def file_size(entries_per_file: int) -> int:
    return entries_per_file * UNIT_SIZE


def encode(unit: CqUnit) -> bytes:
    return UNIT.pack(*unit)


def encode_many(offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray) -> bytes:
    arr = np.empty(len(offsets), dtype=UNIT_DTYPE)
    arr["offset"] = offsets
    arr["size"] = sizes
    arr["tags_code"] = tags_codes
    return arr.tobytes()


def decode(buf: BytesLike, at: int = 0) -> CqUnit:
    return CqUnit(*UNIT.unpack_from(buf, at))


def is_valid(unit: CqUnit) -> bool:
    """RocketMQ's recovery test: offset >= 0 and size > 0 (pre-blank units count as valid)."""
    return unit.commitlog_offset >= 0 and unit.size > 0


OFFSET_SIZE = struct.Struct(">qi")  # a unit's first two fields: commitlog offset, size


def written_at(buf: BytesLike, index: int) -> bool:
    """``is_valid`` for the unit at ``index`` of a segment's bytes (False past their end)."""
    at = index * UNIT_SIZE
    if at + UNIT_SIZE > len(buf):
        return False
    offset, size = OFFSET_SIZE.unpack_from(buf, at)
    return offset >= 0 and size > 0


@functools.lru_cache(maxsize=64)
def column_reads(count: int) -> tuple[struct.Struct, struct.Struct]:
    """Structs reading ``count`` consecutive units' commitlog offsets, and their sizes, each
    in one call (a hot path's columns without a unit object each; the counts asked most
    lately kept)."""
    return struct.Struct(">" + "q12x" * count), struct.Struct(">" + "8xi8x" * count)


def units(buf: BytesLike) -> np.ndarray:
    """All whole units of a buffer as a structured array (no copy for bytes/mmap)."""
    return np.frombuffer(buf, dtype=UNIT_DTYPE, count=len(buf) // UNIT_SIZE)


def valid_count(buf: BytesLike) -> int:
    """Number of leading valid units (where the data of a preallocated segment ends)."""
    arr = units(buf)
    bad = np.flatnonzero((arr["offset"] < 0) | (arr["size"] <= 0))
    return int(bad[0]) if len(bad) else len(arr)
