"""``config/subscriptionGroup.json``: consumer groups' settings, as RocketMQ's broker
persists them (fastjson, pretty, members in alphabetical order)::

    {
        "dataVersion":{
                "counter":1,
                "timestamp":1700000000000
        },
        "subscriptionGroupTable":{
                "groupA":{
                        "brokerId":0,
                        "consumeBroadcastEnable":true,
                        "consumeEnable":true,
                        "consumeFromMinEnable":true,
                        "groupName":"groupA",
                        "notifyConsumerIdsChangedEnable":true,
                        "retryMaxTimes":16,
                        "retryQueueNums":1,
                        "whichBrokerWhenConsumeSlowly":1
                }
        }
    }

``retryMaxTimes`` retries → ``retryMaxTimes + 1`` deliveries before the dead-letter topic.
``consumeMessageOrderly`` (RocketMQ 5's name; 4.9 ignores it) marks a FIFO group and is
written only when true. Members this module does not know are kept as read.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from rmqstore.formats import fastjson

DEFAULT_RETRY_MAX_TIMES = 16
# a group's name as RocketMQ checks it (``TopicValidator.isTopicOrGroupIllegal``, at most
# ``Validators.CHARACTER_MAX_LENGTH``): its %RETRY% and %DLQ% topics are named after it
NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_NAME_LENGTH = 255


def name_error(group: str) -> str | None:
    """Why ``group`` is not a consumer group name RocketMQ accepts (None: it is one)."""
    if not group:
        return "consumer group is empty"
    if len(group) > MAX_NAME_LENGTH:
        return f"consumer group is {len(group)} characters long, at most {MAX_NAME_LENGTH}"
    if not NAME_PATTERN.fullmatch(group):
        return f"consumer group {group!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


@dataclass(frozen=True)
class GroupConfig:
    name: str
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    consume_enable: bool = True
    orderly: bool = False  # FIFO: one message of a queue at a time
    extra: tuple[tuple[str, Any], ...] = ()  # members kept as read

    @property
    def max_attempts(self) -> int:
        return self.retry_max_times + 1


@dataclass
class GroupTable:
    groups: dict[str, GroupConfig] = field(default_factory=dict)
    counter: int = 0
    timestamp: int = 0


_KNOWN = {"groupName", "retryMaxTimes", "consumeEnable", "consumeMessageOrderly"}
_DEFAULTS = {
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeFromMinEnable": True,
    "notifyConsumerIdsChangedEnable": True,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


def _from_json(name: str, d: dict[str, Any]) -> GroupConfig:
    return GroupConfig(
        name=str(d.get("groupName") or name),
        retry_max_times=int(d.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)),
        consume_enable=bool(d.get("consumeEnable", True)),
        orderly=bool(d.get("consumeMessageOrderly", False)),
        extra=tuple((k, v) for k, v in d.items() if k not in _KNOWN),
    )


def _to_json(g: GroupConfig) -> dict[str, Any]:
    d: dict[str, Any] = {**_DEFAULTS, **dict(g.extra)}
    d.update(groupName=g.name, retryMaxTimes=g.retry_max_times, consumeEnable=g.consume_enable)
    if g.orderly:
        d["consumeMessageOrderly"] = True
    else:
        d.pop("consumeMessageOrderly", None)
    return dict(sorted(d.items()))


def parse(text: str) -> GroupTable:
    """A subscriptionGroup.json; ValueError when it is not one."""
    if not text.strip():
        return GroupTable()
    doc = fastjson.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("subscriptionGroup.json is not a JSON object")
    version = doc.get("dataVersion") or {}
    table = doc.get("subscriptionGroupTable", {})
    if not isinstance(table, dict):
        raise ValueError("subscriptionGroup.json: subscriptionGroupTable is not an object")
    return GroupTable(
        groups={n: _from_json(n, d) for n, d in table.items()},
        counter=int(version.get("counter", 0)),
        timestamp=int(version.get("timestamp", 0)),
    )


def render(table: GroupTable) -> str:
    doc = {
        "dataVersion": {"counter": table.counter, "timestamp": table.timestamp},
        "subscriptionGroupTable": {n: _to_json(table.groups[n]) for n in sorted(table.groups)},
    }
    return fastjson.pretty(doc)
