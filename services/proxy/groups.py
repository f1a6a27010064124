"""``rmqstore.v1.ConsumerGroups``: the project's own API over consumer groups (what
``rmqstore group`` shows and does), served on the proxy's port beside MessagingService.
Errors are gRPC statuses: NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE; with access keys on,
every call must be signed as a RocketMQ 5 client signs (``auth``), else UNAUTHENTICATED."""

from typing import Any

import grpc

from rmqstore.formats import subscription_groups as sg
from rmqstore.queue_files import QueueFiles
from rmqstore.v1 import groups_pb2, groups_pb2_grpc
from services.proxy.auth import Authenticator
from services.proxy.consume import Consumption
from services.proxy.group_stats import describe, group_names
from services.proxy.progress import Flight
from services.proxy.status import BusinessError
from services.proxy.topics import TopicBook

add_to_server = groups_pb2_grpc.add_ConsumerGroupsServicer_to_server


def config_of(g: sg.GroupConfig) -> groups_pb2.GroupConfig:
    return groups_pb2.GroupConfig(
        name=g.name, retry_max_times=g.retry_max_times, fifo=g.orderly,
        consume_enable=g.consume_enable,
    )  # fmt: skip


def progress(rows: list[tuple[str, int, int, int, int, int]]) -> list[groups_pb2.QueueProgress]:
    return [
        groups_pb2.QueueProgress(
            topic=t, queue_id=q, committed_offset=c, max_offset=mx, lag=max(0, mx - c),
            in_flight=i, skipped=s,
        )  # fmt: skip
        for t, q, c, mx, i, s in rows
    ]


async def offset_at_time(c: Consumption, files: QueueFiles, topic: str, q: int, ms: int) -> int:
    """The first queue offset whose message was stored at or after ``ms`` (max offset if
    none): a binary search over the consume queue, reading one record per probe."""
    lo, hi = c.low_offset(topic, q), files.max_offset(topic, q)
    while lo < hi:
        mid = (lo + hi) // 2
        units = files.read(topic, q, mid, 1)
        if not units:
            hi = mid
            continue
        (rec,) = await c.records([_flight(units[0].phy_offset)])
        if rec.store_timestamp < ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _flight(phy: int) -> Flight:
    return Flight(0, 0, 0, phy)


class GroupsServicer(groups_pb2_grpc.ConsumerGroupsServicer):
    def __init__(self, consumption: Consumption | None, topics: TopicBook,
                 auth: Authenticator | None = None) -> None:  # fmt: skip
        self.consumption = consumption
        self.topics = topics
        self.auth = auth

    async def _c(self, context: Any) -> Consumption:
        """The groups' state, once the call's signature is checked (every RPC starts here)."""
        if self.auth is not None:
            md = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            try:
                self.auth.check(md)
            except BusinessError as e:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        if self.consumption is None:
            why = "the proxy was started without --store: no consumer groups"
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
        assert self.consumption is not None
        return self.consumption

    async def ListGroups(self, request, context):  # noqa: N802
        c = await self._c(context)
        return groups_pb2.ListGroupsResponse(
            groups=[
                config_of(c.group_table.groups.get(n) or sg.GroupConfig(n)) for n in group_names(c)
            ]
        )

    async def DescribeGroup(self, request, context):  # noqa: N802
        c = await self._c(context)
        if request.group not in group_names(c):
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"consumer group {request.group} is unknown"
            )
        trouble = c.dead_letter_trouble.get(request.group)
        dead = groups_pb2.DeadLetterTrouble(
            failed=trouble.failed, dropped=trouble.dropped, last_error=trouble.last_error
        ) if trouble is not None else None  # fmt: skip
        return groups_pb2.DescribeGroupResponse(
            group=config_of(c.group(request.group)), queues=progress(describe(c, request.group)),
            dead_letters=dead,
        )  # fmt: skip

    async def ResetGroup(self, request, context):  # noqa: N802
        c = await self._c(context)
        if not request.group or not request.topic:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give a group and a topic")
        why = sg.name_error(request.group)
        if why is not None:  # a receive would refuse it: no state for it
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        try:
            topic = await self.topics.get(request.topic)
        except BusinessError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        which = request.WhichOneof("to")
        if which is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give an offset or a time")
        if which == "offset" and request.offset < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the offset must not be negative")
        files = c.queues
        offsets = {}
        for q in range(topic.read_queue_nums):
            low, high = c.low_offset(topic.name, q), files.max_offset(topic.name, q)
            if which == "offset":
                offsets[q] = min(max(request.offset, low), high)
            else:
                offsets[q] = await offset_at_time(c, files, topic.name, q, request.timestamp_ms)
        c.group(request.group)
        c.reset(request.group, topic.name, offsets)
        rows = [r for r in describe(c, request.group) if r[0] == topic.name]
        return groups_pb2.ResetGroupResponse(queues=progress(rows))

    async def CreateGroup(self, request, context):  # noqa: N802
        c = await self._c(context)
        why = sg.name_error(request.group)
        if why is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        return config_of(c.group(request.group))

    def _offset_args(self, request) -> str | None:
        """Why a QueryOffset / CommitOffset request is refused (None: it is not)."""
        if not request.group or not request.topic:
            return "give a group and a topic"
        if request.queue_id < 0:
            return f"queue id {request.queue_id} is negative"
        return sg.name_error(request.group)

    async def QueryOffset(self, request, context):  # noqa: N802
        c = await self._c(context)
        why = self._offset_args(request)
        if why is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        offset = c.committed(request.group, request.topic, request.queue_id)
        if offset is None:
            return groups_pb2.QueryOffsetResponse(found=False)
        return groups_pb2.QueryOffsetResponse(found=True, offset=offset)

    async def CommitOffset(self, request, context):  # noqa: N802
        c = await self._c(context)
        why = self._offset_args(request)
        if why is None and request.offset < 0:
            why = f"offset {request.offset} is negative"
        if why is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        applied = c.commit(request.group, request.topic, request.queue_id, request.offset)
        committed = c.committed(request.group, request.topic, request.queue_id)
        return groups_pb2.CommitOffsetResponse(applied=applied, committed=committed or 0)
