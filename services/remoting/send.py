"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): a 4.x producer's
send, appended through the writer (``spec/rocketmq-remoting.md`` §3.2, §5).

The V2 header carries V1's fields under one-letter names; both are read into one
``SendHeader``. Messages of every connection go through one ``Appender``, which batches
concurrent sends into one writer call. Every refusal is a ``SendRefused`` carrying RocketMQ
4.9.8's response code and remark; a put's outcome becomes the answer's code in one place,
``STATUS_CODES``: the writer's ``PutStatus`` (PUT_OK; under sync_master FLUSH_SLAVE_TIMEOUT or
SLAVE_NOT_AVAILABLE, which a 4.x client counts as stored too) to RocketMQ's response code.
"""

import random
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rmqstore import appender as A
from rmqstore.appender import Appender, Plain, Record, Stored
from rmqstore.broker_perm import READ_WRITE, PermissionReader, writable
from rmqstore.formats import properties as P
from rmqstore.formats import remoting as R
from rmqstore.formats.hosts import Host
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.formats.topics_json import PERM_INHERIT, PERM_WRITE, TopicConfig
from rmqstore.remoting_net import LATER, Later
from rmqstore.v1 import commitlog_pb2, common_pb2
from services.remoting import topics as T
from services.remoting.failures import failure_answer
from services.remoting.transactions import Transactions

RC = R.ResponseCode
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}
TRANSACTION_PREPARED = 0x4
TRANSACTION_TYPES = 0xC  # prepared 0x4, commit 0x8, rollback 0xC
# what the writer takes from a client: compressed (and how: 0x300 zlib), multi-tag, transaction
CLIENT_SYS_FLAGS = 0x1 | 0x2 | TRANSACTION_TYPES | 0x700
# properties the writer sets from a message's own fields, or itself
OWN_FIELDS = (P.TAGS, P.KEYS, P.UNIQ_KEY, P.WAIT, P.DELAY, P.CLUSTER, P.REAL_TOPIC, P.REAL_QID)

# A put's outcome (the writer's PutStatus) -> the send answer's code, in one place.
PUT_OK = commitlog_pb2.PUT_OK
FLUSH_SLAVE_TIMEOUT = commitlog_pb2.FLUSH_SLAVE_TIMEOUT
SLAVE_NOT_AVAILABLE = commitlog_pb2.SLAVE_NOT_AVAILABLE
STATUS_CODES: dict[int, int] = {
    PUT_OK: RC.SUCCESS,
    FLUSH_SLAVE_TIMEOUT: RC.FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE: RC.SLAVE_NOT_AVAILABLE,
}
BATCH_ITEM = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
PROPS_LEN = struct.Struct(">h")
BUSY_REMARK = "[REJECTREQUEST]system busy, start flow control for a while"


class SendRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def append_refused(kind: str, message: str) -> SendRefused:
    """The writer's failures as RocketMQ answers a send (the ``Appender``'s ``make_error``)."""
    if kind == A.REFUSED:
        return SendRefused(RC.MESSAGE_ILLEGAL, message)
    if kind == A.BUSY:
        return SendRefused(RC.SYSTEM_BUSY, f"{BUSY_REMARK}: {message}")
    return SendRefused(RC.SERVICE_NOT_AVAILABLE, f"service not available now: {message}")


@dataclass
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int


def _int(ext: dict[str, str], short: str, default: int | None = None) -> int:
    value = ext.get(short)
    name = V2_NAMES[short]
    if value is None:
        if default is None:
            raise SendRefused(RC.SYSTEM_ERROR, f"the custom field <{name}> is null")
        return default
    try:
        return int(value)
    except ValueError:
        raise SendRefused(
            RC.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {value}"
        ) from None


V1_NAMES = {v: k for k, v in V2_NAMES.items()}


def parse_header(cmd: R.Command) -> SendHeader:
    """The send's header, V1 or V2 names; SYSTEM_ERROR naming a missing required field."""
    ext = cmd.ext or {}
    if cmd.code == R.RequestCode.SEND_MESSAGE:  # V1: read under the short names too
        ext = {V1_NAMES.get(k, k): v for k, v in ext.items()}
    try:  # the common case, every field present and a number: no per-field calls
        return SendHeader(ext["a"], ext["b"], ext["c"], int(ext["d"]), int(ext["e"]),
                          int(ext["f"]), int(ext["g"]), int(ext["h"]), ext.get("i", ""),
                          int(ext.get("j") or 0))  # fmt: skip
    except (KeyError, ValueError):
        pass
    for short in ("a", "b", "c"):
        if ext.get(short) is None:
            raise SendRefused(RC.SYSTEM_ERROR, f"the custom field <{V2_NAMES[short]}> is null")
    return SendHeader(
        ext["a"], ext["b"], ext["c"], _int(ext, "d"), _int(ext, "e"), _int(ext, "f"),
        _int(ext, "g"), _int(ext, "h"), ext.get("i", ""), _int(ext, "j", 0),
    )  # fmt: skip


def split_batch(body: bytes) -> list[tuple[int, bytes, str]]:
    """The inner messages of a batch body: (flag, body, properties) each."""
    out = []
    at = 0
    try:
        while at < len(body):
            total, _magic, _crc, flag, body_len = BATCH_ITEM.unpack_from(body, at)
            start = at + BATCH_ITEM.size
            payload = body[start : start + body_len]
            (props_len,) = PROPS_LEN.unpack_from(body, start + body_len)
            props_at = start + body_len + PROPS_LEN.size
            props = body[props_at : props_at + props_len].decode()
            if total <= 0 or len(payload) != body_len or props_at + props_len > len(body):
                raise ValueError("runs past the body")
            out.append((flag, payload, props))
            at += total
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise SendRefused(RC.MESSAGE_ILLEGAL, f"the batch body does not decode: {e}") from None
    if not out:
        raise SendRefused(RC.MESSAGE_ILLEGAL, "the batch holds no message")
    return out


def to_record(
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: str,
    reconsume_times: int,
) -> Record:
    """One message as the writer takes it: a ``Plain`` when it has nothing else (the writer's
    fast path), else a ``Message``."""
    if len(properties.encode()) > P.MAX_PROPERTIES_LENGTH:
        raise SendRefused(
            RC.MESSAGE_ILLEGAL,
            "the message's properties size is too long "
            f"(more than {P.MAX_PROPERTIES_LENGTH} bytes)",
        )
    props = P.parse(properties)
    tags, keys, uniq = props.get(P.TAGS, ""), props.get(P.KEYS, ""), props.get(P.UNIQ_KEY, "")
    wait = props.get(P.WAIT, "true") != "false"
    try:
        delay = int(props.get(P.DELAY, "0"))
    except ValueError:
        delay = 0
    others = [(k, v) for k, v in props.items() if k not in OWN_FIELDS]
    if not others and uniq and wait and not (flag or sys_flag or delay or reconsume_times):
        return Plain(topic, queue_id, body, tags, keys, uniq, born_host, born_timestamp)
    return common_pb2.Message(
        topic=topic,
        queue_id=queue_id,
        body=body,
        tags=tags,
        keys=keys,
        unique_key=uniq,
        without_unique_key=not uniq,
        properties=[common_pb2.Property(name=k, value=v) for k, v in others],
        flag=flag,
        sys_flag=sys_flag & CLIENT_SYS_FLAGS,
        born_timestamp=born_timestamp,
        born_host=born_host,
        delay_level=max(delay, 0),
        reconsume_times=reconsume_times,
        no_wait_store=not wait,
    )


def answer(
    request: R.Command,
    status: int,
    msg_id: str,
    queue_id: int,
    queue_offset: int,
    transaction_id: str | None = None,
) -> R.Command:
    """The send's answer (extFields never null: the Java client unboxes queueId/queueOffset)."""
    ext = {
        "msgId": msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(queue_offset),
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    if transaction_id is not None:
        ext["transactionId"] = transaction_id
    return R.response_to(request, STATUS_CODES.get(status, RC.SYSTEM_ERROR), ext=ext)


def refused(request: R.Command, e: SendRefused) -> R.Command:
    return R.response_to(request, e.code, ext={}, remark=e.remark)


class Sender:
    """Answers sends. ``topic_created`` is called after a send created its topic (the name
    servers must hear of it)."""

    def __init__(
        self,
        appender: Appender,
        topics: T.Topics,
        store_host: Host,
        broker_name: str,
        auto_create: bool = True,
        max_pending: int = 10_000,
        topic_created: Callable[[str], None] | None = None,
    ) -> None:
        self.appender = appender
        self.topics = topics
        self.store_host = store_host
        self.broker_name = broker_name
        self.auto_create = auto_create
        self.max_pending = max_pending
        self.topic_created = topic_created
        self.pending = 0
        self.stored = 0  # messages stored (runtime info's TPS)
        self.transactions: Transactions | None = None  # none: prepared sends are refused
        self.permission: PermissionReader | None = None  # the broker's (a drain refuses sends)

    def msg_id(self, phy_offset: int) -> str:
        return offset_msg_id(self.store_host.ip, self.store_host.port, phy_offset)

    def handle(self, conn: Any, request: R.Command) -> R.Command | Awaitable[R.Command] | Later:
        """A send, answered without a task where it can be: to a topic known here, it is put
        through ``Appender.submit`` and answered from its callback (``LATER``); a topic to
        ask the writer about (or create) and a transaction's half go the way of ``send``."""
        born_host = conn.remote
        try:
            h = parse_header(request)
            T.check_name(h.topic)
            config = self.topics.cached(h.topic)
            perm = self.permission.known() if self.permission is not None else READ_WRITE
            if config is None or perm is None or self._prepared(h, request):
                return self.send(conn, request)
            self._check_writable(perm)
            queue_id = self._queue(h, config, born_host)
            records = self._records(h, request, queue_id, born_host)
            self._admit()
        except SendRefused as e:
            return refused(request, e)
        except T.TopicError as e:
            return refused(request, SendRefused(RC.SYSTEM_ERROR, str(e)))

        def done(stored: list[Stored] | None, error: BaseException | None) -> None:
            self.pending -= 1
            out: R.Command | BaseException
            try:
                if stored is not None:
                    out = self._answer(request, stored, queue_id)
                elif isinstance(error, SendRefused):
                    out = refused(request, error)
                else:
                    assert error is not None
                    out = failure_answer(request, error) or error
            except Exception as e:  # a bug: the connection logs it, answers "internal error"
                out = e
            conn.respond(request, out)

        self.appender.submit(records, done, sender=born_host)
        return LATER

    async def send(self, conn: Any, request: R.Command) -> R.Command:
        try:
            return await self._send(conn.remote, request)
        except SendRefused as e:
            return refused(request, e)
        except T.TopicError as e:
            return refused(request, SendRefused(RC.SYSTEM_ERROR, str(e)))

    async def _send(self, born_host: str, request: R.Command) -> R.Command:
        h = parse_header(request)
        T.check_name(h.topic)
        if self.permission is not None:
            self._check_writable(await self.permission.current())
        prepared = self._prepared(h, request)
        config = await self._topic(h)
        queue_id = self._queue(h, config, born_host)
        records = self._records(h, request, queue_id, born_host)
        self._admit()
        try:
            if prepared and self.transactions is not None:
                record = records[0]
                message = record.as_message() if isinstance(record, Plain) else record
                half = await self.transactions.prepare(message, h.producer_group, born_host)
                return answer(request, PUT_OK, half.msg_id, queue_id, half.queue_offset)
            stored: list[Stored] = await self.appender.put(records, sender=born_host)
        finally:
            self.pending -= 1
        return self._answer(request, stored, queue_id)

    def _check_writable(self, perm: int) -> None:
        """NO_PERMISSION while the broker is drained (read-only)."""
        if not writable(perm):
            raise SendRefused(
                RC.NO_PERMISSION, f"the broker[{self.broker_name}] sending message is forbidden"
            )

    def _prepared(self, h: SendHeader, request: R.Command) -> bool:
        """Whether the send is a transaction's half (NO_PERMISSION when this broker takes
        none, or it is a batch)."""
        prepared = h.sys_flag & TRANSACTION_TYPES == TRANSACTION_PREPARED
        if prepared and (self.transactions is None
                         or request.code == R.RequestCode.SEND_BATCH_MESSAGE):  # fmt: skip
            raise SendRefused(
                RC.NO_PERMISSION,
                f"the broker[{self.broker_name}] sending transaction message is forbidden",
            )
        return prepared

    def _records(self, h: SendHeader, request: R.Command, queue_id: int,
                 born_host: str) -> list[Record]:  # fmt: skip
        """The send's messages as the writer takes them."""
        if request.code == R.RequestCode.SEND_BATCH_MESSAGE:
            return [
                to_record(h.topic, queue_id, body, props, flag, h.sys_flag, h.born_timestamp,
                          born_host, h.reconsume_times)
                for flag, body, props in split_batch(request.body)
            ]  # fmt: skip
        return [to_record(h.topic, queue_id, request.body, h.properties, h.flag, h.sys_flag,
                          h.born_timestamp, born_host, h.reconsume_times)]  # fmt: skip

    def _admit(self) -> None:
        """Count a send in (SYSTEM_BUSY when ``max_pending`` wait already)."""
        if self.pending >= self.max_pending:
            raise SendRefused(RC.SYSTEM_BUSY, f"{BUSY_REMARK}, {self.pending} sends waiting")
        self.pending += 1

    def _answer(self, request: R.Command, stored: list[Stored], queue_id: int) -> R.Command:
        """The answer to a send stored (a batch: every message's id, the first's offset)."""
        self.stored += len(stored)
        status = stored[0].status  # one for the whole put
        msg_id = ",".join(self.msg_id(s.phy_offset) for s in stored)
        return answer(request, status, msg_id, queue_id, stored[0].queue_offset)

    async def _topic(self, h: SendHeader) -> TopicConfig:
        config = await self.topics.get(h.topic)
        if config is not None:
            return config
        template = await self.topics.get(h.default_topic) if self.auto_create else None
        if template is None or not template.perm & PERM_INHERIT:
            raise SendRefused(
                RC.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!{FAQ}"
            )
        queues = max(1, min(h.default_topic_queue_nums, template.write_queue_nums))
        config = await self.topics.create(h.topic, queues, template.perm & ~PERM_INHERIT)
        if self.topic_created is not None:
            self.topic_created(h.topic)
        return config

    def _queue(self, h: SendHeader, config: TopicConfig, born_host: str) -> int:
        if not config.perm & PERM_WRITE:
            raise SendRefused(
                RC.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden"
            )
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if h.queue_id >= queues:
            raise SendRefused(
                RC.SYSTEM_ERROR,
                f"request queueId[{h.queue_id}] is illegal, "
                f"topic[{h.topic}] has {queues} queues, Producer: {born_host}",
            )
        if h.queue_id < 0:
            return random.randrange(max(config.write_queue_nums, 1))
        return h.queue_id
