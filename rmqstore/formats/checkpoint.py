"""Store checkpoint file (4096 bytes; the rest is zero).

┌───────────────────────────────┬───────────────────────────────┬──────────────────────────────┐
│ physic msg timestamp (int64)  │ logics msg timestamp (int64)  │ index msg timestamp (int64)  │
└───────────────────────────────┴───────────────────────────────┴──────────────────────────────┘
"""

import struct
from typing import NamedTuple

from rmqstore.formats import BytesLike

FIELDS = struct.Struct(">qqq")
FILE_SIZE = 4096


class Checkpoint(NamedTuple):
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's ``getMinTimestamp``: min(physic, logics) - 3 s, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)


def encode(cp: Checkpoint) -> bytes:
    return FIELDS.pack(*cp).ljust(FILE_SIZE, b"\0")


def decode(buf: BytesLike) -> Checkpoint:
    if len(buf) < FIELDS.size:
        return Checkpoint()
    return Checkpoint(*FIELDS.unpack_from(buf, 0))
