"""The JSON documents of consumer groups, one schema for the CLI's ``group list|describe
--json`` and the console's ``/api/v1/groups`` (so scripts and the browser read the same
fields).

A group: groupName, retryMaxTimes (deliveries = retryMaxTimes + 1), fifo, consumeEnable.
A queue's progress: topic, queueId, committedOffset (every offset below is settled),
maxOffset (one past the last message), lag, inFlight, skipped (offsets the group was moved
over since the proxy started because retention had deleted their messages). ``describe`` is
a group plus
``queues``.
"""

from collections.abc import Iterable
from typing import Any

from rmqstore.v1 import groups_pb2


def group_json(g: groups_pb2.GroupConfig) -> dict[str, Any]:
    return {"groupName": g.name, "retryMaxTimes": g.retry_max_times, "fifo": g.fifo,
            "consumeEnable": g.consume_enable}  # fmt: skip


def queue_json(q: groups_pb2.QueueProgress) -> dict[str, Any]:
    return {"topic": q.topic, "queueId": q.queue_id, "committedOffset": q.committed_offset,
            "maxOffset": q.max_offset, "lag": q.lag, "inFlight": q.in_flight,
            "skipped": q.skipped}  # fmt: skip


def describe_json(g: groups_pb2.GroupConfig,
                  queues: Iterable[groups_pb2.QueueProgress]) -> dict[str, Any]:
    return {**group_json(g), "queues": [queue_json(q) for q in queues]}
