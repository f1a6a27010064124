"""Message properties string: ``name 0x01 value 0x02 name 0x01 value`` (RocketMQ 4.9).

No trailing 0x02. Serialization order is Java ``HashMap`` iteration order, which RocketMQ's
broker always re-serializes into: entries sorted stably by bucket, where
``bucket = (h ^ (h >>> 16)) & (capacity - 1)`` and the capacity (16, doubling past 3/4 full)
depends on the largest size the map ever reached.
"""

import functools
from collections.abc import Iterable, Mapping

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
