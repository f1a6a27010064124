"""Whole records by physical offset, checked: what the writer and the read-only store serve.

Both keep their segments mapped; ``find(offset)`` gives the one holding an offset (its
``start`` and ``map``), and ``[lo, hi)`` is the readable range. Retention may delete the
segment a read found meanwhile: its closed mapping raises ValueError, which is answered as
an offset below the store's minimum, like a read that came a moment later.
"""

from collections.abc import Callable, Sequence
from typing import Any

from rmqstore.errors import InvalidArgumentError, OffsetOutOfRangeError, ResourceExhaustedError
from rmqstore.formats import commitlog

Find = Callable[[int], Any]  # offset -> segment (``start``, ``map``)


def record_at(find: Find, lo: int, hi: int, offset: int) -> tuple[Any, int, int]:
    """(segment, position, size) of the record starting at ``offset``; size 0 for a blank
    end-of-segment marker."""
    if offset < lo:
        raise OffsetOutOfRangeError(f"offset {offset} is below the store's minimum offset {lo}")
    if offset >= hi:
        raise OffsetOutOfRangeError(f"offset {offset} is outside the commitlog [{lo}, {hi})")
    seg = find(offset)
    pos = offset - seg.start
    try:
        size, magic = commitlog.peek(seg.map, pos)
        if magic == commitlog.BLANK_MAGIC:
            return seg, pos, 0
        at = pos + commitlog.PHYSICAL_OFFSET_AT
        phy = int.from_bytes(seg.map[at : at + 8], "big", signed=True)
    except ValueError:  # its segment was deleted (and unmapped) meanwhile
        raise _deleted(offset) from None
    if magic not in (commitlog.MAGIC_V1, commitlog.MAGIC_V2) or phy != offset or size <= 0:
        raise InvalidArgumentError(f"offset {offset} does not start a record")
    return seg, pos, size


def read_records(find: Find, lo: int, hi: int, offsets: Sequence[int],
                 max_bytes: int = 1 << 62) -> list[bytes]:
    """Records starting at ``offsets``; RESOURCE_EXHAUSTED past ``max_bytes`` in all."""
    out = []
    total = 0
    for off in offsets:
        seg, pos, size = record_at(find, lo, hi, off)
        if size == 0:
            raise InvalidArgumentError(f"offset {off} is an end-of-segment marker")
        total += size
        if total > max_bytes:
            raise ResourceExhaustedError(
                f"{len(offsets)} records are more than {max_bytes} bytes: ask for fewer"
            )
        try:
            out.append(bytes(seg.map[pos : pos + size]))
        except ValueError:  # its segment was deleted (and unmapped) meanwhile
            raise _deleted(off) from None
    return out


def _deleted(offset: int) -> OffsetOutOfRangeError:
    return OffsetOutOfRangeError(
        f"offset {offset} is below the store's minimum offset (retention deleted its segment)"
    )
