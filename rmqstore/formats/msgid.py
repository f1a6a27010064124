"""Message ids.

Offset message id (broker-made), hex upper-case, 32 or 56 characters:
┌────────────────────────┬─────────────────┬───────────────────────────┐
│ store ip (4 or 16 B)   │ port (int32)    │ commitlog offset (int64)  │
└────────────────────────┴─────────────────┴───────────────────────────┘

UNIQ_KEY (client-made), 32 or 56 characters:
┌──────────────┬────────────┬───────────────────────┬──────────────────────────┬───────────────┐
│ ip (4/16 B)  │ pid (int16)│ class-loader hash (i32)│ ms since month start(u32)│ counter(int16)│
└──────────────┴────────────┴───────────────────────┴──────────────────────────┴───────────────┘

RocketMQ 5 client message id (version 01), 34 characters, stored as the UNIQ_KEY:
┌──────────┬───────────────┬────────────┬────────────────────────────────┬──────────────────┐
│ 0x01     │ MAC (6 B)     │ pid (2 B)  │ seconds since 2021-01-01 (u32) │ sequence (u32)   │
└──────────┴───────────────┴────────────┴────────────────────────────────┴──────────────────┘
"""

import datetime as dt
import functools
import itertools
import os
import struct
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from rmqstore.errors import InvalidArgumentError

_PORT_OFFSET = struct.Struct(">iq")
_UNIQ_TAIL = struct.Struct(">HIIH")  # pid, class-loader hash, ms since month start, counter
OFFSET_ID_LENGTHS = (32, 56)
V5_ID_LENGTH = 34
V5_EPOCH_MS = 1_609_459_200_000  # 2021-01-01T00:00:00Z
_HEX = frozenset("0123456789abcdefABCDEF")


def offset_msg_id(store_ip: bytes, store_port: int, phy_offset: int) -> str:
    return (store_ip + _PORT_OFFSET.pack(store_port, phy_offset)).hex().upper()


def offset_msg_ids(store_ip: bytes, store_port: int, phy_offsets: Sequence[int]) -> list[str]:
    """``offset_msg_id`` of many (non-negative) offsets of one host: its part is made once."""
    host = store_ip + _PORT_OFFSET.pack(store_port, 0)[:4]  # the same in every id
    rows = np.empty(len(phy_offsets), _id_rows(len(host)))
    rows["host"], rows["offset"] = host, phy_offsets
    text, width = rows.tobytes().hex().upper(), 2 * rows.itemsize
    return [text[i : i + width] for i in range(0, len(text), width)]


@functools.cache
def _id_rows(host_size: int) -> np.dtype:
    return np.dtype([("host", f"V{host_size}"), ("offset", ">u8")])


def _hex_bytes(msg_id: str) -> bytes:
    if not msg_id or not set(msg_id) <= _HEX or len(msg_id) % 2:
        raise InvalidArgumentError(f"message id {msg_id!r} is not hexadecimal")
    return bytes.fromhex(msg_id)


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """Return (store ip bytes, store port, commitlog offset) of an offset message id."""
    if len(msg_id) not in OFFSET_ID_LENGTHS:
        raise InvalidArgumentError(
            f"offset message id must have 32 or 56 hex characters, got {len(msg_id)}"
        )
    raw = _hex_bytes(msg_id)
    ip_len = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    return raw[:ip_len], port, offset


def month_start_ms(now_ms: int) -> int:
    """Local-time 00:00 on day 1 of the month containing ``now_ms``."""
    t = dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def _previous_month_start(month_start: int) -> int:
    return month_start_ms(month_start - 1)


class UniqKeyParts(NamedTuple):
    ip: bytes  # 4 or 16 bytes
    pid: int  # low 16 bits of the process id
    class_loader_hash: int  # as an unsigned 32-bit value
    ms_since_month_start: int  # unsigned 32-bit
    counter: int  # low 16 bits


def uniq_key(
    ip: bytes, pid: int, class_loader_hash: int, ms_since_month_start: int, counter: int
) -> str:
    """One UNIQ_KEY from its parts, each truncated to its field width as Java's casts do."""
    tail = _UNIQ_TAIL.pack(
        pid & 0xFFFF,
        class_loader_hash & 0xFFFFFFFF,
        ms_since_month_start & 0xFFFFFFFF,
        counter & 0xFFFF,
    )
    return (ip + tail).hex().upper()


def uniq_key_parts(key: str) -> UniqKeyParts:
    """Split a UNIQ_KEY (32 or 56 hex characters) into its fields."""
    if len(key) not in OFFSET_ID_LENGTHS:
        raise InvalidArgumentError(f"unique key must have 32 or 56 hex characters, got {len(key)}")
    raw = _hex_bytes(key)
    ip_len = len(raw) - _UNIQ_TAIL.size
    return UniqKeyParts(raw[:ip_len], *_UNIQ_TAIL.unpack_from(raw, ip_len))


class UniqKeyGenerator:
    """Makes UNIQ_KEYs the way RocketMQ's client does (ip, pid, loader hash, time, counter)."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01", pid: int | None = None) -> None:
        self._prefix = ip
        self._pid = (os.getpid() if pid is None else pid) & 0xFFFF
        self._loader = id(self) & 0x7FFFFFFF
        self._counter = itertools.count()
        self._month_start = 0
        self._next_month = 0
        self._head = ""

    def next(self, now_ms: int | None = None) -> str:
        return self.at(time.time_ns() // 1_000_000 if now_ms is None else now_ms)()

    def at(self, now_ms: int) -> Callable[[], str]:
        """A maker of keys for one instant (a whole batch): only the counter changes."""
        head, counter = self._head_at(now_ms), self._counter

        def make() -> str:
            return f"{head}{next(counter) & 0xFFFF:04X}"

        return make

    def many(self, now_ms: int, n: int) -> list[str]:
        """``n`` keys for one instant, as ``at(now_ms)`` would make them one by one."""
        head, hex4 = self._head_at(now_ms), _hex4()
        return [head + hex4[c & 0xFFFF] for c in itertools.islice(self._counter, n)]

    def _head_at(self, now_ms: int) -> str:
        """Everything of a key made at ``now_ms`` but its 4-hex-digit counter."""
        if not self._month_start <= now_ms < self._next_month:
            self._month_start = month_start_ms(now_ms)
            self._next_month = month_start_ms(self._month_start + 32 * 86_400_000)
            self._head = uniq_key(self._prefix, self._pid, self._loader, 0, 0)[:-12]
        # the same characters as uniq_key(...), formatted directly
        return f"{self._head}{(now_ms - self._month_start) & 0xFFFFFFFF:08X}"


@functools.cache
def _hex4() -> list[str]:
    """``f"{i:04X}"`` for every 16-bit i (a key's counter; a lookup beats formatting)."""
    return [f"{i:04X}" for i in range(0x10000)]


def uniq_key_time(uniq_key: str, now_ms: int | None = None) -> int:
    """Approximate creation time (ms) inside a UNIQ_KEY, as RocketMQ's ``getNearlyTimeFromID``."""
    if len(uniq_key) not in OFFSET_ID_LENGTHS:
        raise InvalidArgumentError(
            f"unique key must have 32 or 56 hex characters, got {len(uniq_key)}"
        )
    raw = _hex_bytes(uniq_key)
    ip_len = len(raw) - _UNIQ_TAIL.size
    (span,) = struct.unpack_from(">I", raw, ip_len + 6)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start = month_start_ms(now)
    t = start + span
    if t >= now:
        t = _previous_month_start(start) + span
    return t


def is_v5_id(msg_id: str) -> bool:
    """A RocketMQ 5 client's message id (34 hex characters, version 01)."""
    return len(msg_id) == V5_ID_LENGTH and msg_id[:2] == "01" and set(msg_id) <= _HEX


def v5_id_time(msg_id: str) -> int:
    """When a RocketMQ 5 message id was made (ms, to the second)."""
    if not is_v5_id(msg_id):
        raise InvalidArgumentError(f"{msg_id[:80]!r} is not a RocketMQ 5 message id")
    (seconds,) = struct.unpack_from(">I", bytes.fromhex(msg_id), 9)
    return V5_EPOCH_MS + seconds * 1000
