"""Opaque continuation cursor of a key query.

It names the query it belongs to (a hash of topic, key, begin, end) and where the walk
resumes: index file name, entry number in that file (inclusive) and the physical offset of the
last message already returned (records at or above it are not returned again).
URL-safe base64 of ``version | query hash (8 B) | file name (int64) | entry (int32) | phy (int64)``.
"""

import base64
import binascii
import hashlib
import struct
from typing import NamedTuple

from rmqstore.errors import InvalidArgumentError

VERSION = 1
_CURSOR = struct.Struct(">B8sqiq")


class Position(NamedTuple):
    file: str  # index file name (17 digits)
    entry: int  # resume at this entry number (inclusive)
    last_phy: int  # only records below this physical offset are still to come


def query_hash(topic: str, key: str, begin: int, end: int) -> bytes:
    ident = f"{topic}\x00{key}\x00{begin}\x00{end}".encode()
    return hashlib.sha256(ident).digest()[:8]


def encode(qhash: bytes, pos: Position) -> str:
    raw = _CURSOR.pack(VERSION, qhash, int(pos.file), pos.entry, pos.last_phy)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str, qhash: bytes) -> Position:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, h, file_no, entry, last_phy = _CURSOR.unpack(raw)
    except (binascii.Error, ValueError, struct.error) as e:
        raise InvalidArgumentError(f"cursor {cursor[:40]!r} is malformed") from e
    if version != VERSION:
        raise InvalidArgumentError(f"cursor version {version} is not {VERSION}")
    if h != qhash:
        raise InvalidArgumentError(
            "cursor belongs to another query (topic, key, begin and end must be the same)"
        )
    if file_no < 0 or entry < 0:
        raise InvalidArgumentError(f"cursor position {file_no}/{entry} is invalid")
    return Position(f"{file_no:017d}", entry, last_phy)
