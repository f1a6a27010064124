"""``mqadmin``'s consumer commands at the broker (``spec/rocketmq-remoting.md`` §3.4). Committed
offsets live with the proxy's ``ConsumerGroups`` service (the one owner of
``consumerOffset.json`` for both protocols): they are read with ``DescribeGroup`` and moved
with ``ResetGroup``; members come from ``consumer_groups.ConsumerGroups``.

* GET_CONSUME_STATS 208 (consumerProgress): per queue of each topic the group has offsets
  for (or of the header's ``topic``): brokerOffset = max, consumerOffset = committed (0 if
  none), lastTimestamp = store time of the message at consumerOffset − 1 (0 if none).
* QUERY_TOPIC_CONSUME_BY_WHO 300 (topicList -c, queryMsgById): groups subscribed to the topic
  ∪ groups with committed offsets in it.
* GET_CONSUMER_RUNNING_INFO 307 (consumerStatus): forwarded to that client's connection
  (new opaque, 10 s) and its answer returned unchanged.
* INVOKE_BROKER_TO_RESET_OFFSET 222 (resetOffsetByTime): the group's offsets in the topic moved
  to the first message stored at or after ``timestamp`` (−1: the end), then
  RESET_CONSUMER_CLIENT_OFFSET 220 (oneway, same body) to every member. ``isForce=false``
  (mqadmin ``-f false``): as 4.9.8, each queue only moves back, and only the members move
  it (their next commit); the broker commits nothing.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from rmqstore import access_keys
from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Answer, Connection, RemotingError
from rmqstore.v1 import groups_pb2, query_pb2, query_pb2_grpc
from services.remoting import topics as T
from services.remoting.clients import Clients

log = logging.getLogger("rmqstore.remoting")
C = R.RequestCode
RC = R.ResponseCode
CALL_TIMEOUT_S = 30.0
RUNNING_INFO_TIMEOUT_S = 10.0
TO_THE_END = 1 << 62  # ResetGroup clamps an offset to the queue's max
NO_QUEUE = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.OUT_OF_RANGE)  # fmt: skip

Handler = Callable[[Connection, R.Command], Answer | Awaitable[Answer]]


class SignedStub:
    """A gRPC stub whose every call carries the access-key signature the proxy requires
    (``rmqstore/access_keys.py``; none without an access key)."""

    def __init__(self, stub: Any, access_key: str = "", secret_key: str = "") -> None:
        self._stub = stub
        self._keys = (access_key, secret_key)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            return method(request, metadata=access_keys.metadata(*self._keys), **kwargs)

        return call


class ConsumerAdmin:
    def __init__(
        self,
        broker_name: str,
        clients: Clients,
        topics: T.Topics,
        groups: Any,
        query: grpc.aio.Channel,
    ) -> None:
        self.broker_name = broker_name
        self.clients = clients
        self.topics = topics
        self.groups = groups  # the proxy's ConsumerGroups (a SignedStub)
        self.query = query_pb2_grpc.QueryStub(query)

    def handlers(self) -> dict[int, Handler]:
        return {
            C.GET_CONSUME_STATS: self.consume_stats,
            C.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
            C.GET_CONSUMER_RUNNING_INFO: self.running_info,
            C.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    async def committed(self, group: str) -> list[groups_pb2.QueueProgress]:
        """The group's queues with committed offsets; [] for a group the proxy never saw."""
        try:
            reply = await self.groups.DescribeGroup(
                groups_pb2.DescribeGroupRequest(group=group), timeout=CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return list(reply.queues)

    async def _max_offset(self, topic: str, queue_id: int) -> int:
        request = query_pb2.QueueOffsetsRequest(topic=topic, queue_id=queue_id)
        try:
            return (await self.query.QueueOffsets(request, timeout=CALL_TIMEOUT_S)).max_offset
        except grpc.aio.AioRpcError as e:
            if e.code() in NO_QUEUE:
                return 0
            raise

    async def _stored_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset`` (0 when there is none)."""
        if offset < 0:
            return 0
        request = query_pb2.PullRequest(topic=topic, queue_id=queue_id, offset=offset,
                                        max_messages=1)  # fmt: skip
        try:
            pulled = await self.query.Pull(request, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            if e.code() in NO_QUEUE:
                return 0
            raise
        return pulled.messages[0].store_timestamp if pulled.messages else 0

    async def consume_stats(self, conn: Connection, req: R.Command) -> R.Command:
        group, only = req.required("consumerGroup"), req.field("topic") or ""
        rows = {(q.topic, q.queue_id): q for q in await self.committed(group)
                if not only or q.topic == only}  # fmt: skip
        topics = {only} if only else {t for t, _q in rows}
        table: dict[str, Any] = {}
        for topic in sorted(topics):
            config = await self.topics.get(topic)
            queues = range(config.read_queue_nums) if config is not None else ()
            for q in sorted({*queues, *(qid for t, qid in rows if t == topic)}):
                row = rows.get((topic, q))
                committed = row.committed_offset if row is not None else 0
                high = row.max_offset if row is not None else await self._max_offset(topic, q)
                table[R.message_queue_key(self.broker_name, q, topic)] = {
                    "brokerOffset": high,
                    "consumerOffset": committed,
                    "lastTimestamp": await self._stored_at(topic, q, committed - 1),
                }
        return R.response_to(req, body=R.json_body({"consumeTps": 0.0, "offsetTable": table}))

    async def consumed_by(self, conn: Connection, req: R.Command) -> R.Command:
        topic = req.required("topic")
        groups = set(self.clients.groups_of_topic(topic))
        try:
            listed = await self.groups.ListGroups(groups_pb2.ListGroupsRequest(),
                                                  timeout=CALL_TIMEOUT_S)  # fmt: skip
            names = [g.name for g in listed.groups if g.name not in groups]
            described = await asyncio.gather(*(self.committed(n) for n in names))
            groups |= {n for n, qs in zip(names, described, strict=True)
                       if any(q.topic == topic for q in qs)}  # fmt: skip
        except grpc.aio.AioRpcError as e:  # the subscribed groups are still an answer
            log.warning("consumer groups unavailable, answering subscribed groups: %s",
                        e.details())  # fmt: skip
        return R.response_to(req, body=R.json_body({"groupList": sorted(groups)}))

    async def running_info(self, conn: Connection, req: R.Command) -> R.Command:
        group, client_id = req.required("consumerGroup"), req.required("clientId")
        member = next((m for m in self.clients.consumers.get(group, {}).values()
                       if m.client_id == client_id), None)  # fmt: skip
        if member is None:
            return R.response_to(
                req, RC.SYSTEM_ERROR, remark=f"The Consumer <{group}> <{client_id}> not online"
            )
        ask = R.Command(code=C.GET_CONSUMER_RUNNING_INFO, ext=dict(req.ext or {}), body=req.body)
        try:
            got = await member.connection.invoke(ask, RUNNING_INFO_TIMEOUT_S)
        except RemotingError as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=f"invoke consumer failed: {e}")
        return R.response_to(req, got.code, ext=got.ext, body=got.body, remark=got.remark)

    async def _unforced(self, topic: str, timestamp: int,
                        rows: list[groups_pb2.QueueProgress]) -> dict[int, int]:  # fmt: skip
        """An unforced reset as 4.9.8: per queue the offset at ``timestamp`` where that is
        lower than the committed one, else the committed one. Nothing is committed here:
        the members move and commit (a group with no member online stays)."""
        offsets = {}
        for row in rows:
            if timestamp < 0:
                at = row.max_offset
            else:
                request = query_pb2.OffsetByTimeRequest(topic=topic, queue_id=row.queue_id,
                                                        timestamp=timestamp)  # fmt: skip
                try:
                    at = (await self.query.OffsetByTime(request, timeout=CALL_TIMEOUT_S)).offset
                except grpc.aio.AioRpcError as e:
                    if e.code() not in NO_QUEUE:
                        raise
                    at = 0
            offsets[row.queue_id] = min(at, row.committed_offset)
        return offsets

    async def reset_offset(self, conn: Connection, req: R.Command) -> R.Command:
        topic, group = req.required("topic"), req.required("group")
        timestamp = req.number("timestamp")
        if await self.topics.get(topic) is None:
            return R.response_to(req, RC.SYSTEM_ERROR, remark="[reset-offset] reset offset "
                                 f"failed, no topic in this broker. topic={topic}")  # fmt: skip
        rows = [q for q in await self.committed(group) if q.topic == topic]
        if not rows:
            return R.response_to(
                req, RC.SYSTEM_ERROR, remark=f"THe consumer group <{group}> not exist"
            )
        if req.field("isForce") == "false":
            offsets = await self._unforced(topic, timestamp, rows)
        else:
            request = groups_pb2.ResetGroupRequest(group=group, topic=topic)
            if timestamp < 0:
                request.offset = TO_THE_END
            else:
                request.timestamp_ms = timestamp
            reply = await self.groups.ResetGroup(request, timeout=CALL_TIMEOUT_S)
            offsets = {q.queue_id: q.committed_offset for q in reply.queues}
        table = {R.message_queue_key(self.broker_name, q, topic): o for q, o in offsets.items()}
        body = R.json_body({"offsetTable": table})
        members = list(self.clients.consumers.get(group, {}).values())
        for m in members:
            ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "false"}
            m.connection.oneway(R.Command(code=C.RESET_CONSUMER_CLIENT_OFFSET, ext=ext, body=body))
        log.info("offsets of %s in %s reset to time %d, %d members told", group, topic,
                 timestamp, len(members))  # fmt: skip
        return R.response_to(req, body=body)
