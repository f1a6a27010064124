"""``config/topics.json``: RocketMQ's topic configuration, as its broker persists it.

fastjson's pretty format: tabs, no space after ``:``, fields in alphabetical order::

    {
        "dataVersion":{
                "counter":3,
                "timestamp":1700000000000
        },
        "topicConfigTable":{
                "TopicA":{
                        "order":false,
                        "perm":6,
                        "readQueueNums":8,
                        "topicFilterType":"SINGLE_TAG",
                        "topicName":"TopicA",
                        "topicSysFlag":0,
                        "writeQueueNums":8
                }
        }
    }

``attributes`` (RocketMQ 5, e.g. ``{"+message.type":"FIFO"}``) is written only when set;
RocketMQ 4.9 ignores it. Pure functions over text: the file's one writer (the commitlog
writer's process) does the I/O.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from rmqstore.formats import fastjson

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_READ_WRITE = PERM_READ | PERM_WRITE
MESSAGE_TYPE_ATTRIBUTE = "+message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


@dataclass(frozen=True)
class TopicConfig:
    name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = PERM_READ_WRITE
    order: bool = False
    topic_sys_flag: int = 0
    topic_filter_type: str = "SINGLE_TAG"
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def message_type(self) -> str:
        """NORMAL, FIFO, DELAY, TRANSACTION or MIXED (no attribute: MIXED)."""
        return self.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "MIXED")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass
class TopicTable:
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    counter: int = 0
    timestamp: int = 0


def _to_json(t: TopicConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.attributes:
        out["attributes"] = dict(sorted(t.attributes.items()))
    out.update(
        order=t.order,
        perm=t.perm,
        readQueueNums=t.read_queue_nums,
        topicFilterType=t.topic_filter_type,
        topicName=t.name,
        topicSysFlag=t.topic_sys_flag,
        writeQueueNums=t.write_queue_nums,
    )
    return out


def _from_json(name: str, d: dict[str, Any]) -> TopicConfig:
    attributes = d.get("attributes") or {}
    return TopicConfig(
        name=str(d.get("topicName") or name),
        read_queue_nums=int(d.get("readQueueNums", 16)),
        write_queue_nums=int(d.get("writeQueueNums", 16)),
        perm=int(d.get("perm", PERM_READ_WRITE)),
        order=bool(d.get("order", False)),
        topic_sys_flag=int(d.get("topicSysFlag", 0)),
        topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
        attributes={str(k): str(v) for k, v in attributes.items()},
    )


def parse(text: str) -> TopicTable:
    """A topics.json as RocketMQ (or rmqstore) wrote it; ValueError when it is not one."""
    if not text.strip():
        return TopicTable()
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("topics.json is not a JSON object")
    version = doc.get("dataVersion") or {}
    table = doc.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise ValueError("topics.json: topicConfigTable is not an object")
    return TopicTable(
        topics={name: _from_json(name, d) for name, d in table.items()},
        counter=int(version.get("counter", 0)),
        timestamp=int(version.get("timestamp", 0)),
    )


def render(table: TopicTable) -> str:
    """The file's text: topics sorted by name (fastjson writes a HashMap's order; any
    order reads back the same)."""
    doc = {
        "dataVersion": {"counter": table.counter, "timestamp": table.timestamp},
        "topicConfigTable": {n: _to_json(table.topics[n]) for n in sorted(table.topics)},
    }
    return fastjson.pretty(doc)
