"""The broker's answers to remoting requests (``spec/rocketmq-remoting.md`` §3.2–3.4): each
request code to one handler. Sends go to ``Sender``; lookups ask the query service and read
records through the writer; topics are the writer's.

A handler returns the answer, or an awaitable of it (the connection then runs it as a task,
so one slow request never holds up the next on the same connection).
"""

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Answer, Connection, Later, not_supported
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, query_pb2, query_pb2_grpc
from services.remoting import topics as T
from services.remoting.clients import Clients
from services.remoting.failures import failure_answer
from services.remoting.offsets import GroupOffsets
from services.remoting.send import Sender

log = logging.getLogger("rmqstore.remoting")
C = R.RequestCode
RC = R.ResponseCode
QUERY_TIMEOUT_S = 30.0
UNIQUE_KEY_MAX = 32  # 4.9.8 answers a unique-key query with at most this many
SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_")
NO_RECORD = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.DATA_LOSS,
)  # no record at an offset
NO_QUEUE = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE,
)  # the query service's answers for a queue never written

Handler = Callable[[Connection, R.Command], Answer | Awaitable[Answer] | Later]
_AT_ONCE = (R.Command, Later)  # what a handler answers without a coroutine


def _refuse_admin(req: R.Command, topic: str) -> R.Command | None:
    """SYSTEM_ERROR for a topic an administrator may not create, change or delete: a bad
    name or a system topic (4.9.8's remarks); None when it may."""
    try:
        T.check_name(topic)
    except T.TopicError as e:
        return R.response_to(req, RC.SYSTEM_ERROR, remark=str(e))
    if topic in T.SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES):
        return R.response_to(
            req, RC.SYSTEM_ERROR, remark=f"The topic[{topic}] is conflict with system topic."
        )
    return None


@dataclass
class BrokerInfo:
    cluster_name: str
    broker_name: str
    broker_addr: str  # what the name servers hand out, and offset ids carry


class TpsWindow:
    """Messages per second over the last 10 s, 60 s and 600 s, as runtime info's putTps."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count
        self.samples: list[tuple[float, int]] = []

    def text(self) -> str:
        now, n = time.monotonic(), self.count()
        self.samples.append((now, n))
        self.samples = [s for s in self.samples if now - s[0] <= 600] or [(now, n)]
        out = []
        for span in (10, 60, 600):
            old = next((s for s in self.samples if now - s[0] <= span), self.samples[0])
            elapsed = now - old[0]
            out.append(f"{(n - old[1]) / elapsed if elapsed > 0 else 0.0:.2f}")
        return " ".join(out) + " "


class Broker:
    def __init__(
        self,
        info: BrokerInfo,
        sender: Sender,
        topics: T.Topics,
        query: grpc.aio.Channel,
        writer: grpc.aio.Channel,
        clients: Clients,
        topics_changed: Callable[[], None],
    ) -> None:
        self.info = info
        self.sender = sender
        self.topics = topics
        self.query = query_pb2_grpc.QueryStub(query)
        self.writer = commitlog_pb2_grpc.CommitLogStub(writer)
        self.clients = clients
        self.topics_changed = topics_changed
        self.started_ms = int(time.time() * 1000)
        self.tps = TpsWindow(lambda: sender.stored)
        # consumer groups' offsets: kept by the proxy, asked through this (``offsets.py``)
        self.group_offsets = GroupOffsets(None)
        self.handlers: dict[int, Handler] = {
            C.SEND_MESSAGE: sender.handle,
            C.SEND_MESSAGE_V2: sender.handle,
            C.SEND_BATCH_MESSAGE: sender.handle,
            C.HEART_BEAT: self.heartbeat,
            C.UNREGISTER_CLIENT: self.unregister_client,
            C.GET_MAX_OFFSET: self.max_offset,
            C.GET_MIN_OFFSET: self.min_offset,
            C.SEARCH_OFFSET_BY_TIMESTAMP: self.offset_by_time,
            C.QUERY_MESSAGE: self.query_message,
            C.VIEW_MESSAGE_BY_ID: self.view_message,
            C.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            C.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            C.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            C.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            C.GET_TOPIC_STATS_INFO: self.topic_stats,
            C.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
            C.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
        }
        if sender.transactions is not None:
            self.handlers[C.END_TRANSACTION] = sender.transactions.end

    def __call__(self, conn: Connection, req: R.Command) -> Answer | Awaitable[Answer] | Later:
        handler = self.handlers.get(req.code)
        if handler is None:
            return not_supported(req)
        try:
            answer = handler(conn, req)
        except (ValueError, R.FrameError) as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=str(e))
        if answer is None or isinstance(answer, _AT_ONCE):
            return answer
        return self._guard(req, answer)

    async def _guard(self, req: R.Command, answer: Awaitable[Answer]) -> Answer:
        try:
            return await answer
        except Exception as e:
            failed = failure_answer(req, e)
            if failed is None:
                raise
            return failed

    def connection_closed(self, conn: Connection) -> None:
        self.clients.connection_closed(conn)

    # --- clients ---------------------------------------------------------------------------

    def heartbeat(self, conn: Connection, req: R.Command) -> R.Command:
        body = R.parse_json_body(req.body) if req.body else {}
        if not isinstance(body, dict):
            raise ValueError("the heartbeat body is not an object")
        self.clients.heartbeat(conn, body, req.language, req.version)
        return R.response_to(req)  # version 409: the client's idea of the broker's version

    def unregister_client(self, conn: Connection, req: R.Command) -> R.Command:
        self.clients.unregister(conn, req.field("producerGroup"), req.field("consumerGroup"))
        return R.response_to(req, ext={})

    def consumed_by(self, conn: Connection, req: R.Command) -> R.Command:
        groups = self.clients.groups_of_topic(req.required("topic"))
        return R.response_to(req, body=R.json_body({"groupList": groups}))

    def consumer_connections(self, conn: Connection, req: R.Command) -> R.Command:
        group = req.required("consumerGroup")
        members = list(self.clients.consumers.get(group, {}).values())
        if not members:
            return R.response_to(
                req, RC.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online"
            )
        body: dict[str, Any] = {
            "connectionSet": [
                {
                    "clientAddr": m.connection.remote,
                    "clientId": m.client_id,
                    "language": m.language,
                    "version": m.version,
                }
                for m in members
            ],
            "subscriptionTable": {t: s for m in members for t, s in m.subscriptions.items()},
            **members[0].consume,
        }
        return R.response_to(req, body=R.json_body(body))

    # --- offsets ---------------------------------------------------------------------------

    async def _offsets(self, req: R.Command) -> tuple[int, int]:
        return await self._queue_offsets(req.required("topic"), req.number("queueId"))

    async def _queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) of a queue; (0, 0) for a queue that has no messages (as RocketMQ)."""
        request = query_pb2.QueueOffsetsRequest(topic=topic, queue_id=queue_id)
        try:
            reply = await self.query.QueueOffsets(request, timeout=QUERY_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            if e.code() in NO_QUEUE:
                return 0, 0
            raise
        return reply.min_offset, reply.max_offset

    async def max_offset(self, conn: Connection, req: R.Command) -> R.Command:
        return R.response_to(req, ext={"offset": str((await self._offsets(req))[1])})

    async def min_offset(self, conn: Connection, req: R.Command) -> R.Command:
        return R.response_to(req, ext={"offset": str((await self._offsets(req))[0])})

    async def offset_by_time(self, conn: Connection, req: R.Command) -> R.Command:
        request = query_pb2.OffsetByTimeRequest(
            topic=req.required("topic"),
            queue_id=req.number("queueId"),
            timestamp=req.number("timestamp"),
        )
        try:
            reply = await self.query.OffsetByTime(request, timeout=QUERY_TIMEOUT_S)
            offset = reply.offset
        except grpc.aio.AioRpcError as e:
            if e.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise
            offset = 0
        return R.response_to(req, ext={"offset": str(offset)})

    # --- lookups ---------------------------------------------------------------------------

    async def query_message(self, conn: Connection, req: R.Command) -> R.Command:
        topic, key = req.required("topic"), req.required("key")
        limit = req.number("maxNum")
        if req.field("_UNIQUE_KEY_QUERY") == "true":
            limit = UNIQUE_KEY_MAX
        begin, end = req.number("beginTimestamp"), req.number("endTimestamp")
        request = query_pb2.QueryByKeyRequest(
            topic=topic,
            key=key,
            begin_timestamp=begin,
            end_timestamp=end,
            max_results=max(limit, 1),
        )
        try:
            reply = await self.query.QueryByKey(request, timeout=QUERY_TIMEOUT_S)
            messages = list(reply.messages)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: nothing of the topic indexed
                raise
            messages = []
        if not messages:
            return R.response_to(
                req,
                RC.QUERY_NOT_FOUND,
                ext={},
                remark="can not find message, maybe time range not correct",
            )
        reads = commitlog_pb2.ReadRecordsRequest(offsets=[m.phy_offset for m in messages])
        records = (await self.writer.ReadRecords(reads, timeout=QUERY_TIMEOUT_S)).records
        last = max(messages, key=lambda m: m.phy_offset)
        ext = {
            "indexLastUpdateTimestamp": str(last.store_timestamp),
            "indexLastUpdatePhyoffset": str(last.phy_offset),
        }
        return R.response_to(req, ext=ext, body=b"".join(records))

    async def read_record(self, offset: int) -> bytes:
        """The record at a commitlog offset, through the writer."""
        request = commitlog_pb2.ReadRecordsRequest(offsets=[offset])
        reply = await self.writer.ReadRecords(request, timeout=QUERY_TIMEOUT_S)
        return reply.records[0] if reply.records else b""

    async def view_message(self, conn: Connection, req: R.Command) -> R.Command:
        offset = req.number("offset")
        record = b""
        if offset >= 0:
            try:
                record = await self.read_record(offset)
            except grpc.aio.AioRpcError as e:
                if e.code() not in NO_RECORD:
                    raise
        if not record:
            return R.response_to(
                req, RC.SYSTEM_ERROR, remark=f"can not find message by the offset, {offset}"
            )
        return R.response_to(req, body=record)

    # --- administration ----------------------------------------------------------------------

    async def update_topic(self, conn: Connection, req: R.Command) -> R.Command:
        """A new topic, or an existing one's read/write queue counts and perm changed (and
        its message type, given as RocketMQ 5's ``attributes``)."""
        topic = req.required("topic")
        refused = _refuse_admin(req, topic)
        if refused is not None:
            return refused
        read, write = req.number("readQueueNums"), req.number("writeQueueNums")
        kind = T.message_type_of(req.field("attributes") or "")  # RocketMQ 5's mqadmin -a
        if read == write == 0 and await self.topics.get(topic) is None:
            # no queue count (rmqstore topic create --namesrv without --queues): the writer's
            await self.topics.create(topic, 0, req.number("perm"), kind)
        else:
            await self.topics.update(topic, read, write, req.number("perm"), kind)
        self.topics_changed()
        return R.response_to(req, remark="not set any response code")

    async def delete_topic(self, conn: Connection, req: R.Command) -> R.Command:
        """The topic out of the writer's table and this broker's registrations (the name
        servers drop its route on DELETE_TOPIC_IN_NAMESRV, which mqadmin sends next)."""
        topic = req.required("topic")
        refused = _refuse_admin(req, topic)
        if refused is not None:
            return refused
        await self.topics.delete(topic)
        self.topics_changed()
        return R.response_to(req)

    async def topic_table(self) -> dict[str, dict[str, object]]:
        return {t.name: T.to_json(t) for t in await self.topics.all()}

    async def all_topic_config(self, conn: Connection, req: R.Command) -> R.Command:
        body = {
            "dataVersion": {"counter": 0, "timestamp": int(time.time() * 1000)},
            "topicConfigTable": await self.topic_table(),
        }
        return R.response_to(req, body=R.json_body(body))

    async def topic_stats(self, conn: Connection, req: R.Command) -> R.Command:
        topic = req.required("topic")
        config = await self.topics.get(topic)
        if config is None or topic == T.DEFAULT_TOPIC:
            return R.response_to(req, RC.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
        table = {}
        for q in range(config.write_queue_nums):
            low, high = await self._queue_offsets(topic, q)
            last = 0
            if high > low:
                pulled = await self.query.Pull(
                    query_pb2.PullRequest(topic=topic, queue_id=q, offset=high - 1, max_messages=1),
                    timeout=QUERY_TIMEOUT_S,
                )
                last = pulled.messages[0].store_timestamp if pulled.messages else 0
            key = R.message_queue_key(self.info.broker_name, q, topic)
            table[key] = {
                "lastUpdateTimestamp": last,
                "maxOffset": high,
                "minOffset": low,
            }
        return R.response_to(req, body=R.json_body({"offsetTable": table}))

    async def runtime_info(self, conn: Connection, req: R.Command) -> R.Command:
        offsets = await self.writer.GetOffsets(
            commitlog_pb2.GetOffsetsRequest(), timeout=QUERY_TIMEOUT_S
        )
        tps = self.tps.text()
        table = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": str(R.VERSION_4_9_8),
            "putTps": tps,
            "getTransferedTps": "0.00 0.00 0.00 ",
            "getFoundTps": "0.00 0.00 0.00 ",
            "sendThreadPoolQueueSize": str(self.sender.pending),
            "sendThreadPoolQueueCapacity": str(self.sender.max_pending),
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueCapacity": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": "0",
            "commitLogDiskRatio": "0.0",
            "commitLogMinOffset": str(offsets.min_offset),
            "commitLogMaxOffset": str(offsets.max_offset),
            "msgPutTotalTodayNow": str(self.sender.stored),
            "msgGetTotalTodayNow": "0",
            "bootTimestamp": str(self.started_ms),
            "runtime": f"[ {int(time.time() - self.started_ms / 1000)} s ]",
        }
        return R.response_to(req, body=R.json_body({"table": table}))
