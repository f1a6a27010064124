"""``config/delayOffset.json``: the delivery progress of each delay level, as RocketMQ keeps it.

RocketMQ writes it with fastjson, pretty-printed, keys bare integers (not JSON strings), the
entries of the integer-keyed map on one line and the map's closing brace on the next::

    {
    <TAB>"offsetTable":{1:0,2:15,3:7
    <TAB>}
    }

Key = delay level (1-based), value = the schedule queue's offset of the next message to
deliver (queue id = level - 1). Levels are written in ascending order, as the broker's
``ConcurrentHashMap<Integer, Long>`` iterates them. Reading also takes quoted keys, any
spacing, and ignores other fields (RocketMQ 5 adds ``dataVersion``).
"""

import json
import re
from collections.abc import Mapping

from rmqstore.errors import CorruptRecordError

FILE_NAME = "delayOffset.json"
_BARE_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def encode(offsets: Mapping[int, int]) -> str:
    """The file's text for ``{level: next queue offset}``."""
    if not offsets:
        return '{\n\t"offsetTable":{}\n}'
    entries = ",".join(f"{int(level)}:{int(offsets[level])}" for level in sorted(offsets))
    return '{\n\t"offsetTable":{' + entries + "\n\t}\n}"


def decode(text: str) -> dict[int, int]:
    """``{level: next queue offset}`` from the file's text; CorruptRecordError if it is not
    such a file."""
    try:
        doc = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
        table = doc.get("offsetTable") or {}
        out = {int(k): int(v) for k, v in table.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise CorruptRecordError(f"{FILE_NAME} is not RocketMQ's delay offset table: {e}") from e
    bad = [level for level, off in out.items() if level < 1 or off < 0]
    if bad:
        raise CorruptRecordError(f"{FILE_NAME} has a negative offset or a level below 1: {bad}")
    return out
