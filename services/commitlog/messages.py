"""From a producer's message to the record RocketMQ's broker would store (validated first);
its properties string comes from ``message_properties``.
"""

import time
from collections.abc import Iterable, Sequence
from typing import Any

from rmqstore.errors import CorruptRecordError, MessageIllegalError
from rmqstore.formats import commitlog
from rmqstore.formats import commitlog_batch as batch_fmt
from rmqstore.formats import properties as P
from rmqstore.formats.hosts import Host, parse_host
from rmqstore.formats.javahash import tags_code
from rmqstore.formats.msgid import UniqKeyGenerator
from rmqstore.layout import SCHEDULE_TOPIC, validate_topic
from services.commitlog.config import WriterConfig
from services.commitlog.message_properties import PropertiesText, check_text

CLIENT_SYS_FLAGS = (commitlog.COMPRESSED_FLAG | commitlog.MULTI_TAGS_FLAG | 0xC
                    | commitlog.COMPRESSION_TYPE_MASK)


# A message ready for the append lock, as a plain tuple (cheap to make; the engine reads it
# by column): its record but for offsets (see commitlog_batch), record size, stored topic and
# queue id, stored sys flag, tags code, keys, unique key, delay ms (> 0 for the schedule
# topic: its tags code is store time + this), prepared tx offset, and whether it takes the
# next queue offset (not a prepared/rollback record).
Prepared = tuple[batch_fmt.Prepared, int, str, int, int, int, str, str, int, int, bool]


# a batch of Messages from this many takes the plain path when it can (see build_batch)
PLAIN_BATCH_MIN = 8

# prepared messages by column: one sequence per field of Prepared (``()`` for no message);
# the records of a MessageColumns come as one PlainRun or PlainFew
Columns = tuple[Any, ...]


def _column(values, n: int, name: str, empty: str | None = "", one: bool = True) -> list:
    """A per-message column of ``MessageColumns`` as n values: given for each message, or
    (where allowed) once for all, or not at all (``empty`` for each)."""
    if len(values) == n:
        return list(values)
    if one and len(values) == 1:
        return [values[0]] * n
    if not values and empty is not None:
        return [empty] * n
    allowed = ["none" if empty is not None else "", "one" if one else "", str(n)]
    raise MessageIllegalError(
        f"columns.{name} has {len(values)} entries for {n} messages "
        f"(give {' or '.join(a for a in allowed if a)})"
    )


class MessageBuilder:
    """Turns producer messages into encoded records; one per writer (it caches per topic)."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.store_host: Host = config.host
        self.uniq = UniqKeyGenerator(
            self.store_host.ip if len(self.store_host.ip) == 4 else b"\x7f\x00\x00\x01"
        )
        self._born_cache: dict[str, Host] = {}
        self._topics: dict[str, bytes] = {}
        self.props = PropertiesText(config.cluster_name)
        self._templates = self.props.templates  # read on the hot paths
        self.encoder = batch_fmt.BatchEncoder(self.store_host)
        self._record_limit = min(config.max_message_size + 64 * 1024, config.segment_size - 8)
        self._tag_codes: dict[str, int] = {}

    def _born(self, text: str) -> Host:
        if not text:
            return self.store_host
        host = self._born_cache.get(text)
        if host is None:
            host = parse_host(text)
            if len(self._born_cache) < 10_000:
                self._born_cache[text] = host
        return host

    def _tags_code(self, tags: str) -> int:
        code = self._tag_codes.get(tags)
        if code is None:
            code = tags_code(tags)
            if len(self._tag_codes) < 100_000:
                self._tag_codes[tags] = code
        return code

    def _topic_bytes(self, topic: str) -> bytes:
        tb = self._topics.get(topic)
        if tb is None:
            try:
                validate_topic(topic)
            except Exception as e:
                raise MessageIllegalError(str(e)) from None
            if topic == SCHEDULE_TOPIC:
                raise MessageIllegalError(
                    f"topic {SCHEDULE_TOPIC} is reserved for delayed messages"
                )
            tb = topic.encode()
            if len(self._topics) < 100_000:
                self._topics[topic] = tb
        return tb

    def build(self, m, now_ms: int | None = None) -> Prepared:
        """Validate and encode one ``rmqstore.v1.Message``; raises MessageIllegalError."""
        cfg = self.config
        topic = m.topic
        topic_bytes = self._topic_bytes(topic)
        queue_id = m.queue_id
        if not 0 <= queue_id < cfg.queues_per_topic:
            raise MessageIllegalError(
                f"queue id {queue_id} is outside 0..{cfg.queues_per_topic - 1}"
            )
        body = m.body
        if len(body) > cfg.max_message_size:
            raise MessageIllegalError(
                f"body is {len(body)} bytes, the limit is {cfg.max_message_size}"
            )
        sys_flag = m.sys_flag
        if sys_flag & ~CLIENT_SYS_FLAGS:
            raise MessageIllegalError(f"sys flag {sys_flag:#x} sets bits the writer owns")
        level = m.delay_level
        if level < 0:
            raise MessageIllegalError(f"delay level {level} is negative")
        if m.deliver_at_ms and level:
            raise MessageIllegalError("give a delay level or a delivery time, not both")
        tags, keys, uniq = m.tags, m.keys, m.unique_key
        if "\x01" in tags or "\x02" in tags:
            check_text("tags", tags)
        if "\x01" in keys or "\x02" in keys:
            check_text("keys", keys)
        if "\x01" in uniq or "\x02" in uniq:
            check_text("unique key", uniq)
        if not uniq and not m.without_unique_key:
            uniq = self.uniq.next(now_ms)
        delay_ms = 0
        if m.properties or level > 0 or m.deliver_at_ms:
            prop_str, topic, queue_id, delay_ms = self.props.general(m, uniq, now_ms)
            if delay_ms:
                topic_bytes = topic.encode()
        else:
            prop_str = self._templates[(bool(tags), bool(keys), bool(uniq))].format(
                tags, keys, uniq
            )
        props = prop_str.encode()
        if len(props) > P.MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"properties are {len(props)} bytes, the limit is {P.MAX_PROPERTIES_LENGTH}"
            )
        born_ts = m.born_timestamp or (now_ms if now_ms is not None else int(time.time() * 1000))
        try:
            record = self.encoder.prepare(
                topic_bytes, queue_id, body, props, m.flag, sys_flag, born_ts,
                self._born(m.born_host), m.reconsume_times, m.prepared_transaction_offset,
            )  # fmt: skip
        except CorruptRecordError as e:
            raise MessageIllegalError(str(e)) from None
        size = record[batch_fmt.TOTAL_SIZE]
        if size > self._record_limit:
            raise MessageIllegalError(
                f"record is {size} bytes, too large for the limit "
                f"({cfg.max_message_size}) or the segment size ({cfg.segment_size})"
            )
        return (
            record, size, topic, queue_id, record[batch_fmt.SYS_FLAG],
            0 if delay_ms else self._tags_code(tags), keys, uniq, delay_ms,
            m.prepared_transaction_offset,
            not sys_flag & commitlog.NO_QUEUE_OFFSET_BIT,
        )  # fmt: skip

    def build_many(self, messages: Iterable, now_ms: int) -> list[Prepared]:
        """``build`` for each message; the common shape (a known topic, no user properties,
        no delay, IPv4 or default born host) takes a shorter path to the same record."""
        topics, templates, born_cache = self._topics, self._templates, self._born_cache
        queues, max_body = self.config.queues_per_topic, self.config.max_message_size
        prepare, next_uniq, limit = self.encoder.prepare, self.uniq.at(now_ms), self._record_limit
        tag_codes, store = self._tag_codes, self.store_host
        no_queue_offset = commitlog.NO_QUEUE_OFFSET_BIT
        out: list[Prepared] = []
        append = out.append
        for m in messages:
            topic = m.topic
            topic_bytes = topics.get(topic)
            queue_id = m.queue_id
            body = m.body
            sys_flag = m.sys_flag
            born_text = m.born_host
            born = born_cache.get(born_text) if born_text else store
            tags, keys, uniq = m.tags, m.keys, m.unique_key
            text = tags + keys + uniq
            if (
                topic_bytes is None
                or born is None
                or m.delay_level
                or m.deliver_at_ms
                or m.properties
                or not 0 <= queue_id < queues
                or len(body) > max_body
                or sys_flag & ~CLIENT_SYS_FLAGS
                or "\x01" in text
                or "\x02" in text
            ):
                append(self.build(m, now_ms))  # the general path: every check, every error
                continue
            if not uniq and not m.without_unique_key:
                uniq = next_uniq()
            props = templates[(bool(tags), bool(keys), bool(uniq))].format(tags, keys, uniq)
            props_bytes = props.encode()
            code = tag_codes.get(tags)
            if code is None or len(props_bytes) > P.MAX_PROPERTIES_LENGTH:
                append(self.build(m, now_ms))
                continue
            record = prepare(
                topic_bytes, queue_id, body, props_bytes, m.flag, sys_flag,
                m.born_timestamp or now_ms, born, m.reconsume_times,
                m.prepared_transaction_offset,
            )  # fmt: skip
            size = record[batch_fmt.TOTAL_SIZE]
            if size > limit:
                append(self.build(m, now_ms))
                continue
            append(
                (
                    record, size, topic, queue_id, record[batch_fmt.SYS_FLAG], code, keys, uniq,
                    0, m.prepared_transaction_offset, not sys_flag & no_queue_offset,
                )  # fmt: skip
            )
        return out

    def build_batch(self, messages: Sequence, now_ms: int) -> Columns:
        """A call's ``Message``s as the columns the engine appends. A batch of plain messages
        of one topic and born host (no user properties, delay, flag, sys flag or transaction
        offset, none without a unique key) is prepared at once, as ``build_columns`` prepares
        the same columns; any other batch, or one with a message to refuse, message by
        message (``build_many``, whose errors name the field)."""
        if len(messages) >= PLAIN_BATCH_MIN:
            try:
                columns = self._plain_messages(messages, now_ms)
            except MessageIllegalError:
                columns = None
            if columns is not None:
                return columns
        return tuple(zip(*self.build_many(messages, now_ms), strict=True))

    def _plain_messages(self, messages: Sequence, now_ms: int) -> Columns | None:
        first = messages[0]
        topic, born_text = first.topic, first.born_host
        born = self._born_cache.get(born_text) if born_text else self.store_host
        if born is None or any(
            m.topic != topic
            or m.born_host != born_text
            or m.delay_level
            or m.deliver_at_ms
            or m.sys_flag
            or m.flag
            or m.reconsume_times
            or m.prepared_transaction_offset
            or m.without_unique_key
            or m.properties
            for m in messages
        ):
            return None
        bodies = [m.body for m in messages]
        sizes = [len(b) for b in bodies]
        return self._plain(
            topic, [m.queue_id for m in messages], bodies, sizes, [m.tags for m in messages],
            [m.keys for m in messages], [m.unique_key for m in messages],
            [m.born_timestamp or now_ms for m in messages], born, now_ms,
        )  # fmt: skip

    def build_columns(self, c, now_ms: int) -> Columns:
        """The ``MessageColumns`` of one call, checked column by column, as the columns the
        engine appends (see ``Prepared``): the records ``build`` would make of the same
        messages sent one by one."""
        sizes = list(c.body_size)
        n = len(sizes)
        if not n:
            if c.bodies or c.queue_id or c.tags or c.keys or c.unique_key:
                raise MessageIllegalError("columns hold values but body_size lists no message")
            return ()
        self._topic_bytes(c.topic)
        queue_ids = _column(c.queue_id, n, "queue_id", empty=None)
        tags, keys = _column(c.tags, n, "tags"), _column(c.keys, n, "keys")
        uniqs = _column(c.unique_key, n, "unique_key", one=False)
        bodies = c.bodies
        if min(sizes) < 0 or sum(sizes) != len(bodies):
            raise MessageIllegalError(
                f"columns.bodies holds {len(bodies)} bytes but body_size adds up to "
                f"{sum(sizes)}" + (" and has a negative size" if min(sizes) < 0 else "")
            )
        born_timestamp: int | list[int] = c.born_timestamp or now_ms
        if c.born_timestamps:
            each = _column(c.born_timestamps, n, "born_timestamps", one=False)
            born_timestamp = [t or now_ms for t in each]
        return self._plain(
            c.topic, queue_ids, bodies, sizes, tags, keys, uniqs, born_timestamp,
            self._born(c.born_host), now_ms, c.born_host_property,
        )  # fmt: skip

    def _plain(
        self, topic: str, queue_ids: list[int], bodies: bytes | list[bytes], sizes: list[int],
        tags: list[str], keys: list[str], uniqs: list[str], born_timestamp: int | list[int],
        born: Host, now_ms: int, born_property: str = "",
    ) -> Columns:  # fmt: skip
        """Plain messages of one topic as columns, every value checked (a unique key is
        generated where one is empty); ``born_property``: their __BORNHOST, if any."""
        n = len(sizes)
        topic_bytes = self._topic_bytes(topic)
        queues = self.config.queues_per_topic
        if not (min(queue_ids) >= 0 and max(queue_ids) < queues):
            bad = next(q for q in queue_ids if not 0 <= q < queues)
            raise MessageIllegalError(f"queue id {bad} is outside 0..{queues - 1}")
        for what, values in (("tags", tags), ("keys", keys), ("unique key", uniqs),
                             ("born host property", [born_property])):  # fmt: skip
            text = "".join(values)
            if "\x01" in text or "\x02" in text:
                check_text(what, text)
        if not any(uniqs):
            uniqs = self.uniq.many(now_ms, n)
        elif not all(uniqs):
            make = self.uniq.at(now_ms)
            uniqs = [u or make() for u in uniqs]
        if max(sizes) > self.config.max_message_size:
            raise MessageIllegalError(
                f"body of message {sizes.index(max(sizes))} is {max(sizes)} bytes, "
                f"the limit is {self.config.max_message_size}"
            )
        run = self._prepare_columns(
            topic_bytes, queue_ids, bodies, sizes, tags, keys, uniqs, born_timestamp, born,
            born_property,
        )  # fmt: skip
        record_sizes = run.sizes
        if max(record_sizes) > self._record_limit:
            raise MessageIllegalError(
                f"record of message {record_sizes.index(max(record_sizes))} is "
                f"{max(record_sizes)} bytes, too large for the limit "
                f"({self.config.max_message_size}) or the segment size ({self.config.segment_size})"
            )
        code = self._tags_code
        codes = [code(tags[0])] * n if len(set(tags)) == 1 else [code(t) for t in tags]
        return (
            run, record_sizes, [topic] * n, queue_ids, [run.sys_flag] * n,
            codes, keys, uniqs, [0] * n, [0] * n, [True] * n,
        )  # fmt: skip

    def _prepare_columns(
        self, topic: bytes, queue_ids: list[int], bodies: bytes | list[bytes], sizes: list[int],
        tags: list[str], keys: list[str], uniqs: list[str], born_timestamp: int | list[int],
        born: Host, born_property: str,
    ) -> batch_fmt.Plain:  # fmt: skip
        """The records of checked columns. One message (a synchronous sender's) has its
        properties formatted from its template and is prepared on its own."""
        try:
            if len(sizes) == 1:  # a synchronous sender's message: nothing to share
                t, k, u = tags[0], keys[0], uniqs[0]
                props = self._templates[(bool(t), bool(k), True, bool(born_property))]
                record = self.encoder.prepare(
                    topic, queue_ids[0], bodies[0] if isinstance(bodies, list) else bodies,
                    props.format(t, k, u, born_property).encode(), 0, 0,
                    born_timestamp if isinstance(born_timestamp, int) else born_timestamp[0],
                    born,
                )  # fmt: skip
                return batch_fmt.PlainFew.of(self.encoder, record)
            parts = self.props.batch_parts(tags, keys, uniqs, born_property)
            return self.encoder.prepare_plain(
                topic, queue_ids, bodies, sizes, parts, born_timestamp, born
            )
        except CorruptRecordError as e:
            raise MessageIllegalError(str(e)) from None
