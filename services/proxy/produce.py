"""SendMessage: a RocketMQ 5 ``Message`` checked and turned into the record RocketMQ 4.9
stores (spec §9.1). Everything is checked before anything is stored.

| gRPC                         | record                                                  |
|------------------------------|---------------------------------------------------------|
| topic, body                  | TOPIC, BODY; queue chosen here (FIFO: by message group) |
| system message_id            | UNIQ_KEY                                                |
| tag / keys[]                 | TAGS / KEYS joined by spaces                            |
| user_properties              | as they are (reserved names refused)                    |
| message_group                | __SHARDINGKEY                                           |
| born_timestamp / born_host   | BORNTIMESTAMP ms (none: arrival) / __BORNHOST;          |
|                              | BORNHOST = the peer                                     |
| delivery_timestamp           | deliver_at_ms: the writer parks it on its delay levels  |
| TRANSACTION                  | half record: see transactions                           |
"""

import itertools
import re
import time

from rmqstore.formats import properties as P
from rmqstore.formats.javahash import java_hash, utf16_len
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.v1 import common_pb2
from services.proxy.appender import Plain
from services.proxy.status import BusinessError

SHARDING_KEY = "__SHARDINGKEY"
BORN_HOST = P.BORN_HOST
# names a user property may not have: RocketMQ's own (MessageConst), spec §9.4
_RESERVED_NAMES = """
    TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP
    MIN_OFFSET MAX_OFFSET BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG
    RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET
    1ST_POP_TIME TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID
    CORRELATION_ID REPLY_TO_CLIENT TTL ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE
    INNER_MULTI_QUEUE_OFFSET TIMER_DELAY_MS TIMER_DELAY_SEC TIMER_DELIVER_MS TIMER_ENQUEUE_MS
    TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY TIMER_DELAY_LEVEL
    __BORNHOST BORN_TIMESTAMP DLQ_ORIGIN_TOPIC DLQ_ORIGIN_MESSAGE_ID __CRC32# __SHARDINGKEY"""
RESERVED = frozenset(_RESERVED_NAMES.split())
MAX_USER_PROPERTIES = 16 * 1024  # characters, of the 32 Ki a record's properties may use
MESSAGE_ID = re.compile(r"^[0-9A-Za-z_-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Python's client puts the application's delivery time in Timestamp.seconds; its own
# examples pass milliseconds there. A "seconds" value past year 5138 is taken as ms.
MS_IN_SECONDS_FROM = 10**11
TYPE_NAMES = {v: k for k, v in pb.MessageType.items()}


def message_type(m: pb.Message) -> int:
    """The declared type, or (when unspecified) the one its fields imply."""
    sp = m.system_properties
    if sp.message_type != pb.MESSAGE_TYPE_UNSPECIFIED:
        return sp.message_type
    if sp.HasField("message_group"):
        return pb.FIFO
    if sp.HasField("delivery_timestamp"):
        return pb.DELAY
    return pb.NORMAL


def accepts(topic: TopicConfig, kind: int) -> bool:
    declared = topic.message_type
    return declared == "MIXED" or declared == TYPE_NAMES.get(kind)


def delivery_ms(m: pb.Message) -> int:
    ts = m.system_properties.delivery_timestamp
    if ts.seconds > MS_IN_SECONDS_FROM:
        return ts.seconds
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _check_text(code: int, what: str, value: str, extra: str = "") -> None:
    if _CONTROL.search(value) or (extra and any(c in value for c in extra)):
        raise BusinessError(code, f"{what} {value!r} has a control character or one of {extra!r}")


class Sender:
    """Validation and record building for one proxy (it keeps the round-robin counters)."""

    def __init__(self, max_body_size: int, max_delay_ms: int) -> None:
        self.max_body_size = max_body_size
        self.max_delay_ms = max_delay_ms
        self._round_robin: dict[str, itertools.count] = {}

    def validate(self, m: pb.Message, topic: TopicConfig, now_ms: int) -> int:
        """Raise the BusinessError RocketMQ answers for a bad message; its type otherwise."""
        return self._check(m, m.system_properties, topic, now_ms)[0]

    def prepare(self, m: pb.Message, topic: TopicConfig, peer: str, now_ms: int
                ) -> tuple[int, Plain | common_pb2.Message]:  # fmt: skip
        """A message checked (``validate``) and mapped: its type and what to store (``Plain``
        when it can be: a NORMAL message with no user properties, as RocketMQ 5 clients send
        most; else ``record``'s ``Message``)."""
        sp = m.system_properties
        kind, body, keys = self._check(m, sp, topic, now_ms)
        queue_id = self.queue_for(m, topic)
        if kind == pb.NORMAL and not m.user_properties:
            tag = sp.tag if sp.HasField("tag") else ""
            return kind, Plain(
                topic.name, queue_id, body, tag, " ".join(keys), sp.message_id, peer,
                _born_ms(sp) or now_ms, _born_host_property(sp),
            )  # fmt: skip
        return kind, self.record(m, kind, queue_id, peer, now_ms)

    def _check(self, m: pb.Message, sp: pb.SystemProperties, topic: TopicConfig, now_ms: int
               ) -> tuple[int, bytes, list[str]]:  # fmt: skip
        """``validate``: the type, and the body and keys it read (reading copies them)."""
        message_id = sp.message_id
        if not message_id:
            raise BusinessError(pb.ILLEGAL_MESSAGE_ID, "message_id is empty")
        if not MESSAGE_ID.fullmatch(message_id):
            raise BusinessError(pb.ILLEGAL_MESSAGE_ID, f"message_id {message_id!r} is malformed")
        body = m.body
        if not body:
            raise BusinessError(pb.MESSAGE_BODY_EMPTY, "message body is empty")
        if len(body) > self.max_body_size:
            raise BusinessError(
                pb.MESSAGE_BODY_TOO_LARGE,
                f"body is {len(body)} bytes, the limit is {self.max_body_size}",
            )
        if sp.body_encoding == pb.GZIP:
            raise BusinessError(pb.UNSUPPORTED, "GZIP-encoded bodies are not supported")
        if sp.HasField("tag"):
            tag = sp.tag
            if "|" in tag or not tag.isprintable():  # only then can it hold what is refused
                _check_text(pb.ILLEGAL_MESSAGE_TAG, "tag", tag, "|")
            if not tag.strip():
                raise BusinessError(pb.ILLEGAL_MESSAGE_TAG, "tag is blank")
        keys = list(sp.keys) if sp.keys else []  # list() of an empty one costs 4x the test
        for key in keys:
            if not key.strip():
                raise BusinessError(pb.ILLEGAL_MESSAGE_KEY, "a key is blank")
            if " " in key or not key.isprintable():
                _check_text(pb.ILLEGAL_MESSAGE_KEY, "key", key, " ")
        if m.user_properties:
            size = 0
            for name, value in m.user_properties.items():
                if name in RESERVED:
                    raise BusinessError(
                        pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property name {name} is reserved"
                    )
                if not name or not value:
                    raise BusinessError(
                        pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                        f"property {name!r} has an empty name or value",
                    )
                _check_text(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "property", name + value)
                size += utf16_len(name) + utf16_len(value) + 2
            if size > MAX_USER_PROPERTIES:
                raise BusinessError(
                    pb.MESSAGE_PROPERTIES_TOO_LARGE,
                    f"user properties are {size} characters ({MAX_USER_PROPERTIES} at most)",
                )
        kind = message_type(m)
        if kind not in (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION):
            raise BusinessError(pb.BAD_REQUEST, f"message type {kind} is unknown")
        has_group, has_time = sp.HasField("message_group"), sp.HasField("delivery_timestamp")
        if has_group != (kind == pb.FIFO) or has_time != (kind == pb.DELAY):
            raise BusinessError(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"a {TYPE_NAMES[kind]} message "
                + ("needs" if kind in (pb.FIFO, pb.DELAY) else "cannot have")
                + " a message group / delivery time",
            )
        if has_group:
            if not sp.message_group.strip():
                raise BusinessError(pb.ILLEGAL_MESSAGE_GROUP, "message group is blank")
            _check_text(pb.ILLEGAL_MESSAGE_GROUP, "message group", sp.message_group)
        if has_time and delivery_ms(m) - now_ms > self.max_delay_ms:
            raise BusinessError(
                pb.ILLEGAL_DELIVERY_TIME,
                f"delivery time is more than {self.max_delay_ms // 1000} s ahead "
                "(RocketMQ 4.9's largest delay level)",
            )
        if not accepts(topic, kind):
            raise BusinessError(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {topic.name} accepts {topic.message_type} messages, not {TYPE_NAMES[kind]}",
            )
        if not topic.writable:
            raise BusinessError(pb.FORBIDDEN, f"topic {topic.name} is not writable")
        return kind, body, keys

    def queue_for(self, m: pb.Message, topic: TopicConfig) -> int:
        """FIFO: the message group's queue (Java hash mod queue count, so a group always lands
        in one queue); otherwise round robin."""
        queues = max(topic.write_queue_nums, 1)
        sp = m.system_properties
        if sp.HasField("message_group"):
            return abs(java_hash(sp.message_group)) % queues
        counter = self._round_robin.setdefault(topic.name, itertools.count())
        return next(counter) % queues

    def record(
        self, m: pb.Message, kind: int, queue_id: int, peer: str, now_ms: int
    ) -> common_pb2.Message:
        """The writer's Message for a validated NORMAL, FIFO or DELAY message (and the
        starting point of a TRANSACTION half message)."""
        sp = m.system_properties
        props = [common_pb2.Property(name=k, value=v) for k, v in m.user_properties.items()]
        if sp.HasField("message_group"):
            props.append(common_pb2.Property(name=SHARDING_KEY, value=sp.message_group))
        if born_host := _born_host_property(sp):
            props.append(common_pb2.Property(name=BORN_HOST, value=born_host))
        deliver_at = 0  # the writer picks the level and delivers at this exact time
        if kind == pb.DELAY:
            at = delivery_ms(m)
            if at > now_ms:
                deliver_at = at
        born_ms = _born_ms(sp)
        return common_pb2.Message(
            topic=m.topic.name,
            queue_id=queue_id,
            body=m.body,
            tags=sp.tag if sp.HasField("tag") else "",
            keys=" ".join(sp.keys),
            unique_key=sp.message_id,
            properties=props,
            born_timestamp=born_ms or now_ms,
            born_host=peer,
            deliver_at_ms=deliver_at,
        )


def _born_ms(sp: pb.SystemProperties) -> int:
    """The client's born time in ms (0: none given)."""
    if not sp.HasField("born_timestamp"):
        return 0
    born = sp.born_timestamp
    return born.seconds * 1000 + born.nanos // 1_000_000


def _born_host_property(sp: pb.SystemProperties) -> str:
    """What __BORNHOST holds: the client's name for its host (none if it could not be a
    property value)."""
    born_host = sp.born_host
    return born_host if born_host and not P.has_separator(born_host) else ""


def now_ms() -> int:
    return int(time.time() * 1000)
