"""The JSON documents of the read commands, one schema for the CLI's ``--json`` and the
console's ``/api/v1/`` (so scripts and the browser read the same fields).

A message: msgId, uniqKey, topic, queueId, queueOffset, phyOffset, size, storeTimestamp,
bornTimestamp (epoch ms), hosts, sysFlag, keys, tags, properties, and the body as text when it
is UTF-8, else base64 (``bodyEncoding`` says which). A command's document is its fields below
plus ``messages``.
"""

import base64
from collections.abc import Iterable
from typing import Any

from rmqstore.v1 import common_pb2, query_pb2


def message_json(m: common_pb2.StoredMessage) -> dict[str, Any]:
    try:
        body, encoding = m.body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(m.body).decode(), "base64"
    return {
        "msgId": m.msg_id,
        "uniqKey": m.unique_key,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "phyOffset": m.phy_offset,
        "size": m.size,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "bornHost": m.born_host,
        "storeHost": m.store_host,
        "sysFlag": m.sys_flag,
        "keys": m.keys,
        "tags": m.tags,
        "properties": {p.name: p.value for p in m.properties},
        "body": body,
        "bodyEncoding": encoding,
    }


def with_messages(fields: dict[str, Any], messages: Iterable) -> dict[str, Any]:
    """A command's document: its fields and then ``messages``."""
    return {**fields, "messages": [message_json(m) for m in messages]}


def key_fields(resp: query_pb2.QueryByKeyResponse) -> dict[str, Any]:
    """``query-key``: how many, whether the page was cut, the cursor of the next page."""
    return {"count": len(resp.messages), "truncated": resp.truncated, "cursor": resp.cursor,
            "budgetExhausted": resp.budget_exhausted, "chainHops": resp.chain_hops}


def id_fields(resp: query_pb2.QueryByIdResponse) -> dict[str, Any]:
    """``query-id``."""
    return {"count": len(resp.messages)}


def cluster_fields(resp: Any) -> dict[str, Any]:
    """A cluster-wide answer's ``partial`` and its brokers' part, each ``ok``,
    ``unreachable``, ``timeout``, ``failed`` or ``not_asked``."""
    return {"partial": resp.partial, "brokers": [
        {"broker": b.broker_name, "address": b.address,
         "answer": query_pb2.BrokerAnswer.Name(b.answer).removeprefix("ANSWER_").lower(),
         "detail": b.detail, "messages": b.messages} for b in resp.brokers]}  # fmt: skip


def pull_fields(resp: query_pb2.PullResponse) -> dict[str, Any]:
    """``pull``: RocketMQ's pull status and the queue's offsets."""
    return {"status": query_pb2.PullStatus.Name(resp.status), "nextOffset": resp.next_offset,
            "minOffset": resp.min_offset, "maxOffset": resp.max_offset}
