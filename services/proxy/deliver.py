"""A stored record as the ``Message`` a consumer receives (spec §9.4), and the tag filter.

| field                        | from                                                  |
|------------------------------|-------------------------------------------------------|
| message_id                   | UNIQ_KEY, else the offset message id (as RocketMQ's)  |
| tag / keys / message_group   | TAGS / KEYS split on spaces / __SHARDINGKEY           |
| message_type                 | __SHARDINGKEY: FIFO, TIMER_DELIVER_MS/DELAY: DELAY…   |
| body_encoding / body_digest  | IDENTITY (4.9-compressed bodies inflated) / MD5 upper |
| born/store time and host     | the record's (born host: __BORNHOST when present)     |
| queue_id / queue_offset      | the record's                                          |
| receipt_handle, attempt      | from the delivery                                     |
| user_properties              | every property that is not RocketMQ's own             |
"""

import hashlib
import zlib
from typing import Any

from rmqstore.delay import TIMER_DELIVER_MS
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats.javahash import java_hash
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.produce import BORN_HOST, RESERVED, SHARDING_KEY

COMPRESSED_FLAG = 0x1
HIDDEN = RESERVED | {P.CLUSTER}


class TagFilter:
    """``*`` or empty: every message; else ``a||b``: a message whose tag is one of those."""

    def __init__(self, expression: str) -> None:
        parts = {t.strip() for t in expression.split("||")} - {""}
        self.all = not parts or "*" in parts
        self.tags = frozenset(parts)
        self.codes = frozenset(java_hash(t) for t in parts)

    def maybe(self, tags_code: int) -> bool:
        """The consume queue's tags code may match (checked again on the record)."""
        return self.all or tags_code in self.codes

    def matches(self, tag: str) -> bool:
        return self.all or tag in self.tags


def message(
    r: commitlog.Record, topic: str, handle: str, attempt: int, invisible_ms: int
) -> pb.Message:
    """Built from plain values in one constructor call (protobuf fills nested fields in
    place: a third cheaper than building each part as a message and copying it in)."""
    props = r.property_map
    body = r.body
    if r.sys_flag & COMPRESSED_FLAG:
        body = zlib.decompress(body)
    born, stored = r.born_timestamp, r.store_timestamp
    sp: dict[str, Any] = {
        # a 4.x client may send no UNIQ_KEY (ali-ons): RocketMQ's proxy then gives the
        # offset message id, so every message a consumer gets has an id of its own
        "message_id": props.get(P.UNIQ_KEY)
        or offset_msg_id(r.store_host.ip, r.store_host.port, r.physical_offset),
        "body_digest": {"type": pb.MD5, "checksum": hashlib.md5(body).hexdigest().upper()},
        "body_encoding": pb.IDENTITY,
        "born_host": props.get(BORN_HOST) or str(r.born_host),
        "store_host": str(r.store_host),
        "receipt_handle": handle,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "delivery_attempt": attempt,
        "invisible_duration": {
            "seconds": invisible_ms // 1000, "nanos": invisible_ms % 1000 * 1_000_000
        },
        "born_timestamp": {"seconds": born // 1000, "nanos": born % 1000 * 1_000_000},
        "store_timestamp": {"seconds": stored // 1000, "nanos": stored % 1000 * 1_000_000},
        "message_type": pb.NORMAL,
    }  # fmt: skip
    keys = props.get(P.KEYS)
    if keys:
        sp["keys"] = [k for k in keys.split(" ") if k]
    tag = props.get(P.TAGS)
    if tag:
        sp["tag"] = tag
    if SHARDING_KEY in props:
        sp["message_group"] = props[SHARDING_KEY]
        sp["message_type"] = pb.FIFO
    elif TIMER_DELIVER_MS in props or P.DELAY in props:
        sp["message_type"] = pb.DELAY
        if TIMER_DELIVER_MS in props and props[TIMER_DELIVER_MS].isdigit():
            at = int(props[TIMER_DELIVER_MS])
            sp["delivery_timestamp"] = {"seconds": at // 1000, "nanos": at % 1000 * 1_000_000}
    elif props.get(P.TRAN_MSG) == "true" or r.prepared_transaction_offset:
        sp["message_type"] = pb.TRANSACTION
    user = {k: v for k, v in props.items() if k not in HIDDEN}
    return pb.Message(topic={"name": topic}, user_properties=user, system_properties=sp, body=body)
