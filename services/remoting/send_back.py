"""CONSUMER_SEND_MSG_BACK 36: a 4.x consumer gives a message it failed to consume back to the
broker (``spec/rocketmq-remoting.md`` §3.3), with RocketMQ 4.9.8's semantics:

1. the record at the request's commit-log ``offset`` is read through the writer;
2. its copy keeps body, flag, properties, tags, keys, UNIQ_KEY, born host and time; it gains
   ``RETRY_TOPIC`` = the record's topic and ``ORIGIN_MESSAGE_ID`` = the record's offset
   message id, unless it has them (a copy of a copy names the first); reconsumeTimes + 1;
   not waited for (``WAIT=false``);
3. old reconsumeTimes >= maxReconsumeTimes (the request's if its version >= 121, else 16),
   or ``delayLevel`` < 0 → ``%DLQ%<group>`` queue 0, no delay;
4. else ``%RETRY%<group>`` queue 0 through the delay levels: ``delayLevel``, or
   3 + old reconsumeTimes when it is 0, so the writer stores it in the schedule topic and
   delivers it when due; the writer caps the level at the last of its table
   (``--delay-levels``: the one table, as RocketMQ's store caps it).

Both topics are created when missing: 1 queue, perm 6 (read and write), then registered
with the name servers.
"""

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import grpc

from rmqstore import retries
from rmqstore.appender import Appender, AppendError
from rmqstore.broker_perm import PermissionReader, writable
from rmqstore.errors import StoreError
from rmqstore.formats import commitlog
from rmqstore.formats import properties as P
from rmqstore.formats import remoting as R
from rmqstore.formats.msgid import offset_msg_id
from rmqstore.formats.topics_json import PERM_READ, PERM_WRITE
from rmqstore.remoting_net import Answer, Connection, Handler, Later
from rmqstore.v1 import common_pb2
from services.remoting import topics as T
from services.remoting.broker import NO_RECORD
from services.remoting.send import CLIENT_SYS_FLAGS, OWN_FIELDS

log = logging.getLogger("rmqstore.remoting")
RC = R.ResponseCode
VERSION_3_4_9 = 121  # from this client version on, the request's maxReconsumeTimes counts
FIRST_AUTO_LEVEL = 3  # delayLevel 0: level 3 + reconsume times (10 s, 30 s, 1 min, ...)
COPY_QUEUES = 1
COPY_PERM = PERM_READ | PERM_WRITE


class SendBackWatcher(Protocol):
    """What the metrics are told (``metrics_remoting.ConsumerGroupMetrics``)."""

    def sent_back(self, group: str, dead: bool) -> None: ...


def max_reconsume_times(req: R.Command, group_max: int) -> int:
    """The request's maxReconsumeTimes from client version 3.4.9 on, else the group's."""
    if req.version >= VERSION_3_4_9:
        return req.number("maxReconsumeTimes", group_max)
    return group_max


def copy_of(r: commitlog.Record, to_topic: str, delay_level: int) -> common_pb2.Message:
    """The record given back, as the writer takes it (steps 2–4 of the module's list)."""
    props = dict(r.property_map)
    props.setdefault(retries.RETRY_TOPIC, r.topic)
    if not props.get(retries.ORIGIN_MESSAGE_ID):
        props[retries.ORIGIN_MESSAGE_ID] = offset_msg_id(
            r.store_host.ip, r.store_host.port, r.physical_offset
        )
    return common_pb2.Message(
        topic=to_topic,
        queue_id=0,
        body=r.body,
        tags=r.tags,
        keys=r.keys,
        unique_key=r.uniq_key,
        without_unique_key=not r.uniq_key,
        properties=[
            common_pb2.Property(name=k, value=v)
            for k, v in props.items()
            if k not in OWN_FIELDS and v != ""
        ],
        flag=r.flag,
        sys_flag=r.sys_flag & CLIENT_SYS_FLAGS & ~0xC,  # no transaction bits on a copy
        born_timestamp=r.born_timestamp,
        born_host=str(r.born_host),
        delay_level=delay_level,
        reconsume_times=r.reconsume_times + 1,
        no_wait_store=True,
    )


class SendBack:
    """``read(offset)`` is the record at a commit-log offset (b"" when there is none);
    ``topics_changed`` is called after a retry or dead-letter topic was created."""

    def __init__(
        self,
        appender: Appender,
        topics: T.Topics,
        read: Callable[[int], Awaitable[bytes]],
        topics_changed: Callable[[], None],
        watcher: SendBackWatcher | None = None,
        retry_max_times: Callable[[str], int] = lambda g: retries.DEFAULT_MAX_RECONSUME_TIMES,
    ) -> None:
        self.retry_max_times = retry_max_times
        self.appender = appender
        self.topics = topics
        self.read = read
        self.topics_changed = topics_changed
        self.watcher = watcher
        self.permission: PermissionReader | None = None  # the broker's: a drain refuses

    async def __call__(self, conn: Connection, req: R.Command) -> R.Command:
        offset = req.number("offset")
        group = req.field("group")
        if not group:
            raise ValueError("the custom field <group> is null")
        level = req.number("delayLevel")
        limit = max_reconsume_times(req, self.retry_max_times(group))
        retry, dead = retries.group_retry_topic(group), retries.dead_letter_topic(group)
        if retry is None or dead is None:
            why = f"subscription group not exist, {group}"
            return R.response_to(req, RC.SUBSCRIPTION_GROUP_NOT_EXIST, remark=why)
        if self.permission is not None and not writable(await self.permission.current()):
            # as 4.9.8: the consumer then sends the retry through its producer, to a broker
            # that takes sends
            return R.response_to(req, RC.NO_PERMISSION,
                                 remark="the broker is read-only: sending message is forbidden")
        raw = b""
        if offset >= 0:
            try:
                raw = await self.read(offset)
            except grpc.aio.AioRpcError as e:
                if e.code() not in NO_RECORD:
                    raise
        if not raw:
            return R.response_to(
                req, RC.SYSTEM_ERROR, remark=f"look message by offset failed, {offset}"
            )
        try:
            record = commitlog.decode(raw)
        except (ValueError, StoreError) as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=f"the record at {offset}: {e}")
        to_dlq = record.reconsume_times >= limit or level < 0
        if to_dlq:
            to_topic, level = dead, 0
        else:
            to_topic = retry
            if level == 0:
                level = FIRST_AUTO_LEVEL + record.reconsume_times
        await _create(self.topics, to_topic, self.topics_changed)
        try:
            await self.appender.put([copy_of(record, to_topic, level)], sender=conn.remote)
        except AppendError as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=f"send back failed: {e}")
        if self.watcher is not None:
            self.watcher.sent_back(group, to_dlq)
        if to_dlq:
            log.info("message at %d of %s moved to %s after %d reconsumes",
                     offset, record.topic, dead, record.reconsume_times)  # fmt: skip
        return R.response_to(req)


class RetrySendDiverter:
    """SEND_MESSAGE(_V2) to ``%RETRY%<group>`` as 4.9.8's ``handleRetryAndDLQ``: a message
    already reconsumed ``maxReconsumeTimes`` times (header ``j`` >= ``l``, 16 without it) —
    an orderly consumer's copy after its last local retry, or a Java consumer's own copy
    when CONSUMER_SEND_MSG_BACK failed — goes to ``%DLQ%<group>`` queue 0 without delay.
    Every other send passes to ``send`` unchanged."""

    def __init__(self, send: Callable[[Connection, R.Command], Awaitable[R.Command]],
                 topics: T.Topics, topics_changed: Callable[[], None],
                 watcher: SendBackWatcher | None = None,
                 handle: Handler | None = None) -> None:  # fmt: skip
        self.send = send
        self.handle = handle or send  # the common case's (``Sender.handle``: without a task)
        self.topics = topics
        self.topics_changed = topics_changed
        self.watcher = watcher
        self.permission: PermissionReader | None = None  # the broker's: a drain refuses

    def __call__(self, conn: Connection, req: R.Command) -> Answer | Awaitable[Answer] | Later:
        topic = (req.ext or {}).get("topic" if req.code == R.RequestCode.SEND_MESSAGE else "b")
        if topic is None or not topic.startswith(retries.RETRY_PREFIX):
            return self.handle(conn, req)  # the common case: no extra step
        return self._retry_send(conn, req)

    async def _retry_send(self, conn: Connection, req: R.Command) -> R.Command:
        ext = req.ext or {}
        v1 = req.code == R.RequestCode.SEND_MESSAGE
        topic_key, times_key, max_key, queue_key, props_key = (
            ("topic", "reconsumeTimes", "maxReconsumeTimes", "queueId", "properties") if v1
            else ("b", "j", "l", "e", "i")
        )  # fmt: skip
        topic = ext[topic_key]
        try:
            times = int(ext.get(times_key) or 0)
            limit = int(ext.get(max_key) or retries.DEFAULT_MAX_RECONSUME_TIMES)
        except ValueError:
            return await self.send(conn, req)  # the send refuses it with its own remark
        if req.version < VERSION_3_4_9:
            limit = retries.DEFAULT_MAX_RECONSUME_TIMES
        group = topic[len(retries.RETRY_PREFIX) :]
        dead = retries.dead_letter_topic(group)
        if times < limit or dead is None:
            return await self.send(conn, req)
        if self.permission is not None and not writable(await self.permission.current()):
            return await self.send(conn, req)  # refused as any send: no dead-letter topic made
        await _create(self.topics, dead, self.topics_changed)
        props = P.parse(ext.get(props_key) or "")
        props.pop(P.DELAY, None)
        diverted = {**ext, topic_key: dead, queue_key: "0", props_key: P.encode(props)}
        answer = await self.send(conn, dataclasses.replace(req, ext=diverted))
        if answer.code == RC.SUCCESS and self.watcher is not None:
            self.watcher.sent_back(group, True)
        return answer


async def _create(topics: T.Topics, name: str, changed: Callable[[], None]) -> None:
    """``name`` created unless it exists (1 queue, perm 6); the name servers told."""
    if await topics.get(name) is None:
        await topics.create(name, COPY_QUEUES, COPY_PERM)
        changed()
