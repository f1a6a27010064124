"""RocketMQ 4.x consumers' offsets (``spec/rocketmq-remoting.md`` §3.3): QUERY_CONSUMER_OFFSET,
UPDATE_CONSUMER_OFFSET, GET_EARLIEST_MSG_STORETIME.

The broker keeps no consumer progress of its own: the proxy owns ``consumerOffset.json`` and
``subscriptionGroup.json`` (one writing process per file), so every query and commit is a call
to its ``rmqstore.v1.ConsumerGroups`` service (``QueryOffset``, ``CommitOffset``), signed when
access keys are on. ``GroupOffsets`` is that client: anything in the broker that reads or moves
a group's offset (pulls' commit piggyback, group administration) goes through it.
"""

import logging
from dataclasses import dataclass, field

import grpc

from rmqstore import access_keys
from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Connection
from rmqstore.v1 import groups_pb2, groups_pb2_grpc, query_pb2, query_pb2_grpc

log = logging.getLogger("rmqstore.remoting")
RC = R.ResponseCode
PROXY_TIMEOUT_S = 10.0
QUERY_TIMEOUT_S = 30.0
NOT_COMMITTED = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"  # 4.9.8's
NO_PROXY = "no consumer progress: the broker was started without --proxy"


class OffsetsUnavailable(Exception):
    """The proxy that owns consumer progress cannot be asked (none configured, or down)."""


@dataclass
class GroupOffsets:
    """Client of the proxy's ``ConsumerGroups`` offsets calls. ``commits``/``refused`` count
    commits applied and commits the proxy did not apply (the group pops that queue)."""

    channel: grpc.aio.Channel | None
    keys: tuple[str, str] = ("", "")  # (access key, secret key): calls signed when set
    commits: int = 0
    refused: int = 0
    _stub: groups_pb2_grpc.ConsumerGroupsStub | None = field(default=None, repr=False)

    def stub(self) -> groups_pb2_grpc.ConsumerGroupsStub:
        if self.channel is None:
            raise OffsetsUnavailable(NO_PROXY)
        if self._stub is None:
            self._stub = groups_pb2_grpc.ConsumerGroupsStub(self.channel)
        return self._stub

    async def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, None when the group has committed none there."""
        request = groups_pb2.QueryOffsetRequest(group=group, topic=topic, queue_id=queue_id)
        try:
            reply = await self.stub().QueryOffset(
                request, timeout=PROXY_TIMEOUT_S, metadata=access_keys.metadata(*self.keys)
            )
        except grpc.aio.AioRpcError as e:
            raise OffsetsUnavailable(f"consumer progress unavailable: {e.details()}") from None
        return reply.offset if reply.found else None

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the proxy applied the commit (it does not while the group pops the queue)."""
        request = groups_pb2.CommitOffsetRequest(
            group=group, topic=topic, queue_id=queue_id, offset=offset
        )
        try:
            reply = await self.stub().CommitOffset(
                request, timeout=PROXY_TIMEOUT_S, metadata=access_keys.metadata(*self.keys)
            )
        except grpc.aio.AioRpcError as e:
            raise OffsetsUnavailable(f"consumer progress unavailable: {e.details()}") from None
        if reply.applied:
            self.commits += 1
        else:
            self.refused += 1
            log.info("commit of %s@%s queue %d to %d not applied: the group pops that queue "
                     "(committed %d)", topic, group, queue_id, offset, reply.committed)  # fmt: skip
        return reply.applied


class OffsetHandlers:
    """The offset commands' handlers (``Broker.handlers`` maps the codes to them)."""

    def __init__(self, offsets: GroupOffsets, query: grpc.aio.Channel) -> None:
        self.offsets = offsets
        self.query = query_pb2_grpc.QueryStub(query)

    async def query_offset(self, conn: Connection, req: R.Command) -> R.Command:
        """QUERY_CONSUMER_OFFSET: the committed offset, else QUERY_NOT_FOUND: the client then
        starts where its consumeFromWhere says (FIRST 0, LAST the max offset, TIMESTAMP a
        search). Unlike 4.9.8 on a fresh store (spec P11) a new group gets QUERY_NOT_FOUND
        even while the queue's offset 0 is readable, so CONSUME_FROM_LAST_OFFSET means it."""
        group, topic = req.required("consumerGroup"), req.required("topic")
        try:
            offset = await self.offsets.query(group, topic, req.number("queueId"))
        except OffsetsUnavailable as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=str(e))
        if offset is None:
            return R.response_to(req, RC.QUERY_NOT_FOUND, ext={}, remark=NOT_COMMITTED)
        return R.response_to(req, ext={"offset": str(offset)})

    async def update_offset(self, conn: Connection, req: R.Command) -> R.Command:
        """UPDATE_CONSUMER_OFFSET (Java: oneway; ali-ons: a request)."""
        group, topic = req.required("consumerGroup"), req.required("topic")
        queue_id, offset = req.number("queueId"), req.number("commitOffset")
        if offset < 0 or queue_id < 0:
            why = f"bad offset {offset} or queue {queue_id}"
            return R.response_to(req, RC.SYSTEM_ERROR, remark=why)
        try:
            await self.offsets.commit(group, topic, queue_id, offset)
        except OffsetsUnavailable as e:
            return R.response_to(req, RC.SYSTEM_ERROR, remark=str(e))
        return R.response_to(req, ext={})

    async def earliest_store_time(self, conn: Connection, req: R.Command) -> R.Command:
        """GET_EARLIEST_MSG_STORETIME: the store time of the queue's first message still
        stored; SYSTEM_ERROR as 4.9.8 when the queue has none."""
        topic, queue_id = req.required("topic"), req.number("queueId")
        failed = R.response_to(
            req, RC.SYSTEM_ERROR,
            remark=f"Find the message of the earliest time failed, topic: {topic} "
            f"queueId: {queue_id}",
        )  # fmt: skip
        try:
            bounds = await self.query.QueueOffsets(
                query_pb2.QueueOffsetsRequest(topic=topic, queue_id=queue_id),
                timeout=QUERY_TIMEOUT_S,
            )
            if bounds.max_offset <= bounds.min_offset:
                return failed
            pulled = await self.query.Pull(
                query_pb2.PullRequest(topic=topic, queue_id=queue_id,
                                      offset=bounds.min_offset, max_messages=1),
                timeout=QUERY_TIMEOUT_S,
            )  # fmt: skip
        except grpc.aio.AioRpcError:
            return failed
        if not pulled.messages:
            return failed
        return R.response_to(req, ext={"timestamp": str(pulled.messages[0].store_timestamp)})
