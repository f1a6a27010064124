"""From a producer's message to the record RocketMQ's broker would store (validated first).

Properties are assembled as the broker does: the client's map (TAGS, KEYS, user properties,
DELAY, WAIT, UNIQ_KEY in insertion order), WAIT removed for a normal send, CLUSTER added;
a delayed message keeps WAIT and gains REAL_TOPIC/REAL_QID and moves to SCHEDULE_TOPIC_XXXX
queue level-1. Then serialized in Java HashMap order.
"""

import time
from dataclasses import dataclass

from rmqstore import delay
from rmqstore.errors import MessageIllegalError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats.hosts import Host, parse_host
from rmqstore.formats.javahash import tags_code, utf16_len
from rmqstore.formats.msgid import UniqKeyGenerator
from rmqstore.layout import SCHEDULE_TOPIC, validate_topic
from services.commitlog.config import WriterConfig

RESERVED = frozenset(
    (P.KEYS, P.TAGS, P.UNIQ_KEY, P.DELAY, P.WAIT, P.CLUSTER, P.REAL_TOPIC, P.REAL_QID)
)
CLIENT_SYS_FLAGS = commitlog.COMPRESSED_FLAG | commitlog.MULTI_TAGS_FLAG | 0xC


@dataclass(slots=True)
class Prepared:
    """An encoded record waiting for its offsets, plus what dispatch needs."""

    data: bytearray
    topic: str
    queue_id: int
    sys_flag: int
    tags_code: int
    keys: str
    uniq_key: str
    delay_ms: int  # > 0 for the schedule topic: tags code = store time + this
    prepared_transaction_offset: int

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def advances_queue(self) -> bool:
        return commitlog.transaction_type(self.sys_flag) in (
            commitlog.TRANSACTION_NOT_TYPE,
            commitlog.TRANSACTION_COMMIT_TYPE,
        )


def _check_text(what: str, value: str) -> None:
    if P.has_separator(value):
        raise MessageIllegalError(f"{what} contains a property separator (\\x01 or \\x02)")


class MessageBuilder:
    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.store_host: Host = config.host
        self.uniq = UniqKeyGenerator(self.store_host.ip if len(self.store_host.ip) == 4 else
                                     b"\x7f\x00\x00\x01")
        self._born_cache: dict[str, Host] = {}

    def _born(self, text: str) -> Host:
        if not text:
            return self.store_host
        host = self._born_cache.get(text)
        if host is None:
            host = parse_host(text)
            if len(self._born_cache) < 10_000:
                self._born_cache[text] = host
        return host

    def build(self, m, now_ms: int | None = None) -> Prepared:
        """Validate and encode one ``rmqstore.v1.Message``; raises MessageIllegalError."""
        cfg = self.config
        topic = m.topic
        try:
            validate_topic(topic)
        except Exception as e:
            raise MessageIllegalError(str(e)) from None
        if topic == SCHEDULE_TOPIC:
            raise MessageIllegalError(f"topic {SCHEDULE_TOPIC} is reserved for delayed messages")
        if not 0 <= m.queue_id < cfg.queues_per_topic:
            raise MessageIllegalError(
                f"queue id {m.queue_id} is outside 0..{cfg.queues_per_topic - 1}"
            )
        body = m.body
        if len(body) > cfg.max_message_size:
            raise MessageIllegalError(
                f"body is {len(body)} bytes, the limit is {cfg.max_message_size}"
            )
        if m.sys_flag & ~CLIENT_SYS_FLAGS:
            raise MessageIllegalError(f"sys flag {m.sys_flag:#x} sets bits the writer owns")
        if m.delay_level < 0:
            raise MessageIllegalError(f"delay level {m.delay_level} is negative")
        tx = commitlog.transaction_type(m.sys_flag)
        props: dict[str, str] = {}
        if m.tags:
            _check_text("tags", m.tags)
            props[P.TAGS] = m.tags
        if m.keys:
            _check_text("keys", m.keys)
            props[P.KEYS] = m.keys
        for prop in m.properties:
            if not prop.name or not prop.value:
                raise MessageIllegalError(f"property {prop.name!r} has an empty name or value")
            if prop.name in RESERVED:
                raise MessageIllegalError(f"property {prop.name} is set by its own field")
            _check_text(f"property {prop.name!r}", prop.name + prop.value)
            props[prop.name] = prop.value
        level = m.delay_level
        delayed = level > 0 and tx in (commitlog.TRANSACTION_NOT_TYPE,
                                       commitlog.TRANSACTION_COMMIT_TYPE)
        if level > 0:
            props[P.DELAY] = str(level)
        props[P.WAIT] = "false" if m.no_wait_store else "true"
        uniq = m.unique_key
        if uniq:
            _check_text("unique key", uniq)
        elif not m.without_unique_key:
            uniq = self.uniq.next(now_ms)
        if uniq:
            props[P.UNIQ_KEY] = uniq
        max_size = len(props) + 1
        queue_id = m.queue_id
        delay_ms = 0
        if delayed:
            level = delay.clamp_level(level)
            props[P.CLUSTER] = cfg.cluster_name
            props[P.REAL_TOPIC] = topic
            props[P.REAL_QID] = str(queue_id)
            max_size = len(props)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            delay_ms = delay.delay_ms(level)
        else:
            del props[P.WAIT]
            props[P.CLUSTER] = cfg.cluster_name
        prop_str = P.encode(props, max_size)
        if utf16_len(prop_str) > P.MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"properties are {utf16_len(prop_str)} characters, the limit is 32767"
            )
        born_ts = m.born_timestamp or (now_ms if now_ms is not None else int(time.time() * 1000))
        rec = commitlog.Record(
            topic=topic, queue_id=queue_id, body=body, properties=prop_str, flag=m.flag,
            sys_flag=m.sys_flag, born_timestamp=born_ts, born_host=self._born(m.born_host),
            store_host=self.store_host, reconsume_times=m.reconsume_times,
            prepared_transaction_offset=m.prepared_transaction_offset,
        )
        try:
            data = bytearray(commitlog.encode(rec))
        except Exception as e:
            raise MessageIllegalError(str(e)) from None
        if len(data) > cfg.max_message_size + 64 * 1024 or len(data) + 8 > cfg.segment_size:
            raise MessageIllegalError(
                f"record is {len(data)} bytes, too large for the limit "
                f"({cfg.max_message_size}) or the segment size ({cfg.segment_size})"
            )
        sys_flag = int.from_bytes(data[commitlog.SYS_FLAG_AT:commitlog.SYS_FLAG_AT + 4], "big")
        return Prepared(
            data=data, topic=topic, queue_id=queue_id, sys_flag=sys_flag,
            tags_code=tags_code(m.tags) if not delay_ms else 0, keys=m.keys, uniq_key=uniq,
            delay_ms=delay_ms, prepared_transaction_offset=m.prepared_transaction_offset,
        )
