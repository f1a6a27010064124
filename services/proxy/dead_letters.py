"""Dead letters: the copy of a message that exhausted its deliveries (or that a FIFO
PushConsumer forwarded), appended to ``%DLQ%<group>`` queue 0 as RocketMQ does.

| record                | value                                              |
|-----------------------|----------------------------------------------------|
| TOPIC / QUEUEID       | ``%DLQ%<group>`` / 0                               |
| BODY, TAGS, KEYS      | the original's                                     |
| UNIQ_KEY              | the original message id (a client sees one id)     |
| DLQ_ORIGIN_TOPIC      | the topic it came from                             |
| DLQ_ORIGIN_MESSAGE_ID | the original message id                            |
| RETRY_TOPIC, ORIGIN_MESSAGE_ID | as 4.9's send-back writes them            |
| RECONSUMETIMES (header), RECONSUME_TIME | deliveries so far - 1            |
| user properties, __SHARDINGKEY, __BORNHOST | kept                          |
"""

from typing import Any

from rmqstore.formats import commitlog
from rmqstore.v1 import common_pb2
from services.proxy import deliver

DLQ_PREFIX = "%DLQ%"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
DLQ_KEEP = frozenset(("__SHARDINGKEY", "__BORNHOST"))


def dead_letter(group: str, topic: str, r: commitlog.Record, attempts: int) -> common_pb2.Message:
    """The ``%DLQ%<group>`` copy of a record: same body, tags, keys and UNIQ_KEY, with where it
    came from (``DLQ_ORIGIN_TOPIC``, ``DLQ_ORIGIN_MESSAGE_ID``) and its deliveries so far."""
    props: dict[str, Any] = {
        k: v for k, v in r.property_map.items() if k not in deliver.HIDDEN or k in DLQ_KEEP
    }
    props.update(
        {
            DLQ_ORIGIN_TOPIC: topic,
            DLQ_ORIGIN_MESSAGE_ID: r.uniq_key,
            "RETRY_TOPIC": topic,
            "ORIGIN_MESSAGE_ID": r.uniq_key,
            "RECONSUME_TIME": str(attempts - 1),
        }
    )
    return common_pb2.Message(
        topic=DLQ_PREFIX + group,
        queue_id=0,
        body=r.body,
        tags=r.tags,
        keys=r.keys,
        unique_key=r.uniq_key,
        properties=[common_pb2.Property(name=k, value=v) for k, v in props.items()],
        flag=r.flag,
        sys_flag=r.sys_flag & deliver.COMPRESSED_FLAG,
        born_timestamp=r.born_timestamp,
        born_host=str(r.born_host),
        reconsume_times=max(attempts - 1, 0),
    )
