"""The copies a consumer group writes of a message it consumes, as RocketMQ does: a retry
copy to ``%RETRY%<group>_<topic>`` queue 0 when the message's invisible time is over, and a
dead letter to ``%DLQ%<group>`` queue 0 when it has had its last delivery (or a FIFO
PushConsumer forwarded it). A copy of a copy still names the original.

| record                    | retry copy                      | dead letter                   |
|---------------------------|---------------------------------|-------------------------------|
| TOPIC / QUEUEID           | ``%RETRY%<group>_<topic>`` / 0  | ``%DLQ%<group>`` / 0          |
| BODY, TAGS, KEYS, flag    | the original's                  | the original's                |
| UNIQ_KEY                  | the original message id (a client sees one id)                  |
| RETRY_TOPIC               | the topic the group consumes (the original's topic)             |
| ORIGIN_MESSAGE_ID         | the original message id (none if it has no UNIQ_KEY)            |
| RECONSUME_TIME + header   | deliveries so far               | deliveries so far - 1         |
| DLQ_ORIGIN_TOPIC / _ID    | —                               | the original topic / id       |
| user properties, __SHARDINGKEY, __BORNHOST | kept                                           |
"""

from typing import Any

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats import commitlog
from rmqstore.layout import validate_topic
from rmqstore.retries import (  # noqa: F401 (shared with the 4.x broker; named here too)
    DLQ_PREFIX,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    RETRY_PREFIX,
    RETRY_TOPIC,
    dead_letter_topic,
    origin_id,
)
from rmqstore.v1 import common_pb2
from services.proxy import deliver

DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
KEEP = frozenset(("__SHARDINGKEY", "__BORNHOST"))  # RocketMQ's own, yet carried along


def retry_topic(group: str, topic: str) -> str | None:
    """The group's retry topic for ``topic`` (RocketMQ 5's per-topic form); None when that
    name cannot be a topic (too long, or the group has characters a topic may not)."""
    name = f"{RETRY_PREFIX}{group}_{topic}"
    try:
        return validate_topic(name)
    except InvalidArgumentError:
        return None


def deliveries(r: commitlog.Record, attempt: int) -> int:
    """Deliveries so far of a message handed out ``attempt`` times from this record (a
    retry copy carries those before it in its reconsume times)."""
    return max(attempt, r.reconsume_times + 1)


def _copy(to_topic: str, origin: str, r: commitlog.Record, reconsume: int,
          extra: dict[str, str]) -> common_pb2.Message:  # fmt: skip
    props: dict[str, Any] = {
        k: v for k, v in r.property_map.items() if k not in deliver.HIDDEN or k in KEEP
    }
    props.update({RETRY_TOPIC: origin, ORIGIN_MESSAGE_ID: origin_id(r),
                  RECONSUME_TIME: str(reconsume), **extra})  # fmt: skip
    # a message stored without a UNIQ_KEY has no id to name: the writer refuses an empty value
    props = {k: v for k, v in props.items() if v != ""}
    return common_pb2.Message(
        topic=to_topic,
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
        reconsume_times=reconsume,
    )


def retry_copy(to_topic: str, origin: str, r: commitlog.Record,
               attempts: int) -> common_pb2.Message:  # fmt: skip
    """The copy in the retry topic ``to_topic`` of a message of ``origin`` delivered
    ``attempts`` times: its next delivery is attempt ``attempts + 1``."""
    return _copy(to_topic, origin, r, attempts, {})


def dead_letter(group: str, origin: str, r: commitlog.Record,
                attempts: int) -> common_pb2.Message:  # fmt: skip
    """The ``%DLQ%<group>`` copy of a message of ``origin`` delivered ``attempts`` times."""
    extra = {DLQ_ORIGIN_TOPIC: origin, DLQ_ORIGIN_MESSAGE_ID: origin_id(r)}
    return _copy(DLQ_PREFIX + group, origin, r, max(attempts - 1, 0), extra)
