"""RocketMQ 4.x consumers' offsets (``spec/rocketmq-remoting.md`` §3.3): QUERY_CONSUMER_OFFSET,
UPDATE_CONSUMER_OFFSET, GET_EARLIEST_MSG_STORETIME.

The broker keeps no consumer progress of its own: the proxy owns ``consumerOffset.json`` and
``subscriptionGroup.json`` (one writing process per file), so every query and commit is a call
to its ``rmqstore.v1.ConsumerGroups`` service (``QueryOffset``, ``CommitOffset``), signed when
access keys are on. ``GroupOffsets`` is that client: anything in the broker that reads or moves
a group's offset (pulls' commit piggyback, group administration) goes through it.

A push consumer commits with nearly every pull (sysFlag 0x1). Those commits are not waited
for: the latest of each queue is kept and passed on every ``COMMIT_LINGER_S`` by one task, so
a pull is answered at once and a queue pulled many times a second costs a few calls. A query
or an explicit commit of a queue with a commit kept or on its way first waits for it to be
passed on (what was committed is what is read back); a graceful stop passes on what is kept.
Like RocketMQ's broker, which keeps commits in memory and persists them every 5 s, a killed
broker loses the last of them: the consumer receives those messages again (at least once).
"""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import grpc

from rmqstore import access_keys
from rmqstore.formats import remoting as R
from rmqstore.remoting_net import Connection
from rmqstore.v1 import groups_pb2, groups_pb2_grpc, query_pb2, query_pb2_grpc

log = logging.getLogger("rmqstore.remoting")
RC = R.ResponseCode
PROXY_TIMEOUT_S = 10.0
COMMIT_LINGER_S = 0.2  # pulls' commits are passed on this often at most
LOST_LOG_INTERVAL_S = 60.0  # pulls' commits that could not be passed on: logged this often
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
    linger_s: float = COMMIT_LINGER_S
    commits: int = 0
    refused: int = 0
    lost: int = 0  # pulls' commits the proxy could not be given
    _stub: groups_pb2_grpc.ConsumerGroupsStub | None = field(default=None, repr=False)
    # pulls' commits: (group, topic, queue) -> offset, kept, then on their way to the proxy
    _kept: dict[tuple[str, str, int], int] = field(default_factory=dict, repr=False)
    _sending: dict[tuple[str, str, int], int] = field(default_factory=dict, repr=False)
    _passer: asyncio.Task | None = field(default=None, repr=False)
    _round: asyncio.Future | None = field(default=None, repr=False)  # done as a round ends
    _now: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _warned_at: float = field(default=-LOST_LOG_INTERVAL_S, repr=False)

    def stub(self) -> groups_pb2_grpc.ConsumerGroupsStub:
        if self.channel is None:
            raise OffsetsUnavailable(NO_PROXY)
        if self._stub is None:
            self._stub = groups_pb2_grpc.ConsumerGroupsStub(self.channel)
        return self._stub

    async def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, None when the group has committed none there."""
        await self._settled((group, topic, queue_id))
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
        await self._settled((group, topic, queue_id))
        return await self._commit(group, topic, queue_id, offset)

    def commit_later(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A pull's commit: kept (the latest of the queue) and passed on within
        ``linger_s`` by the one task that passes on every kept commit."""
        self._kept[(group, topic, queue_id)] = offset
        if self._passer is None:  # nobody waits for a round: the linger starts now
            loop = asyncio.get_running_loop()
            self._now.clear()
            self._round = loop.create_future()
            self._passer = loop.create_task(self._pass_on())

    async def close(self) -> None:
        """Pass on the kept commits now (a graceful stop)."""
        self._now.set()
        if self._passer is not None:
            await asyncio.shield(self._passer)

    async def _settled(self, key: tuple[str, str, int]) -> None:
        """Until no commit of ``key`` is kept or on its way."""
        while self._round is not None and (key in self._kept or key in self._sending):
            self._now.set()
            await asyncio.shield(self._round)

    async def _pass_on(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._kept:
                if not self._now.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._now.wait(), self.linger_s)
                self._now.clear()
                self._sending, self._kept = self._kept, {}
                results = await asyncio.gather(
                    *(self._commit(*key, offset) for key, offset in self._sending.items()),
                    return_exceptions=True,
                )  # fmt: skip
                if failed := [r for r in results if isinstance(r, BaseException)]:
                    self._lost(len(failed), failed[0])
                self._sending = {}
                self._round_over(loop.create_future())
        finally:
            self._passer, self._sending = None, {}
            self._round_over(None)

    def _round_over(self, then: asyncio.Future | None) -> None:
        done, self._round = self._round, then
        if done is not None and not done.done():
            done.set_result(None)

    def _lost(self, count: int, why: BaseException) -> None:
        self.lost += count
        now = time.monotonic()
        if now - self._warned_at >= LOST_LOG_INTERVAL_S:
            self._warned_at = now
            log.warning("pull commits not passed on to the proxy (%d since the start): %s",
                        self.lost, why)  # fmt: skip

    async def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
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
