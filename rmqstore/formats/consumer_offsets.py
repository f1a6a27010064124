"""``config/consumerOffset.json``: each consumer group's committed offset per queue, as
RocketMQ's broker persists it (fastjson, pretty, **integer keys unquoted**)::

    {
        "offsetTable":{
                "TopicA@groupA":{0:12,1:7
                },
                "%RETRY%groupA@groupA":{0:0
                }
        }
    }

Key ``<topic>@<group>``; value per queue id = the next offset to consume (every offset below
it is settled). RocketMQ 5 adds a ``dataVersion`` object: read and written back when present.
Pure functions over text; the file's one writer (the proxy) does the I/O.
"""

from dataclasses import dataclass, field
from typing import Any

from rmqstore.formats import fastjson

SEPARATOR = "@"


def key(topic: str, group: str) -> str:
    return f"{topic}{SEPARATOR}{group}"


def split_key(k: str) -> tuple[str, str]:
    """``topic@group`` → (topic, group); the group is after the last ``@``."""
    topic, sep, group = k.rpartition(SEPARATOR)
    if not sep or not topic or not group:
        raise ValueError(f"consumerOffset.json: key {k!r} is not <topic>@<group>")
    return topic, group


@dataclass
class OffsetTable:
    # (topic, group) -> {queue id: committed offset}
    offsets: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    data_version: dict[str, Any] | None = None


def parse(text: str) -> OffsetTable:
    """A consumerOffset.json as RocketMQ or rmqstore wrote it; ValueError when it is not one."""
    if not text.strip():
        return OffsetTable()
    doc = fastjson.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("consumerOffset.json is not a JSON object")
    table = doc.get("offsetTable", {})
    if not isinstance(table, dict):
        raise ValueError("consumerOffset.json: offsetTable is not an object")
    out = OffsetTable(data_version=doc.get("dataVersion"))
    for k, queues in table.items():
        if not isinstance(queues, dict):
            raise ValueError(f"consumerOffset.json: {k} is not a map of queue offsets")
        out.offsets[split_key(k)] = {int(q): int(o) for q, o in queues.items()}
    return out


def render(table: OffsetTable) -> str:
    """The file's text (keys sorted, so equal tables give equal files)."""
    doc: dict[str, Any] = {}
    if table.data_version is not None:
        doc["dataVersion"] = table.data_version
    doc["offsetTable"] = {
        key(t, g): fastjson.IntKeyMap(sorted(table.offsets[(t, g)].items()))
        for t, g in sorted(table.offsets)
    }
    return fastjson.pretty(doc)
