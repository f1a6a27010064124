"""``MessagingService``'s consumer RPCs: QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue. They translate the protocol to
``consume.Consumption`` and back; business failures are a ``Status`` (gRPC status OK).
Mixed into ``servicer.MessagingServicer``."""

import logging
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from rmqstore.formats import subscription_groups as sg
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from services.proxy import status
from services.proxy.consume import Consumption
from services.proxy.deliver import TagFilter
from services.proxy.status import BusinessError

log = logging.getLogger(__name__)
MIN_INVISIBLE_MS = 0
MAX_INVISIBLE_MS = 12 * 3600 * 1000
DEADLINE_MARGIN_S = 0.5  # answer this long before the client's deadline
DEFAULT_POLL_S = 20.0
OK_STATUS = status.ok()


def duration_ms(d: Any) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


class ConsumerRpcs:
    consumption: Consumption | None
    topics: Any
    router: Any
    metrics: Any

    def _caller(self, context: Any, rpc: str) -> str:
        raise NotImplementedError  # MessagingServicer's

    def _refused(self, rpc: str, e: BusinessError) -> pb.Status:
        raise NotImplementedError  # MessagingServicer's

    def _consumption(self) -> Consumption:
        if self.consumption is None:
            raise BusinessError(
                pb.INTERNAL_SERVER_ERROR,
                "this proxy was started without --store: it cannot consume",
            )
        return self.consumption

    async def _readable(self, name: str) -> Any:
        topic = await self.topics.get(name)
        if not topic.readable:
            raise BusinessError(pb.FORBIDDEN, f"topic {name} is not readable")
        return topic

    @staticmethod
    def _group(resource: pb.Resource) -> str:
        """The group's name, refused as RocketMQ refuses it (its retry and dead-letter topics
        are named after it)."""
        why = sg.name_error(resource.name)
        if why is not None:
            raise BusinessError(pb.ILLEGAL_CONSUMER_GROUP, why)
        return resource.name

    async def QueryAssignment(self, request, context):  # noqa: N802
        """Non-FIFO group: one assignment of each whole broker (queue id -1, RocketMQ's way);
        FIFO: one per readable queue. In a cluster, every live broker's, each at its own
        proxy."""
        try:
            self._caller(context, "QueryAssignment")
            group = self._group(request.group)
            topic = await self._readable(request.topic.name)
            queues = [q for q in await self.router.cluster_queues(topic)
                      if q.permission in (pb.READ, pb.READ_WRITE)]  # fmt: skip
            if not queues:
                raise BusinessError(pb.FORBIDDEN, f"topic {topic.name} has no readable queue")
            if not self._consumption().group(group).orderly:
                first: dict[str, pb.MessageQueue] = {}
                for queue in queues:
                    if queue.broker.name not in first:
                        q = first[queue.broker.name] = pb.MessageQueue()
                        q.CopyFrom(queue)
                        q.id = -1
                queues = list(first.values())
        except BusinessError as e:
            return spb.QueryAssignmentResponse(status=self._refused("QueryAssignment", e))
        return spb.QueryAssignmentResponse(
            status=status.ok(), assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    async def ReceiveMessage(self, request, context) -> AsyncIterator[spb.ReceiveMessageResponse]:  # noqa: N802
        try:
            client_id = self._caller(context, "ReceiveMessage")
            consumption = self._consumption()
            group = self._group(request.group)
            topic = await self._readable(request.message_queue.topic.name)
            expr = request.filter_expression
            if expr.type == pb.SQL:
                raise BusinessError(pb.UNSUPPORTED, "SQL filter expressions are not supported")
            if request.HasField("invisible_duration"):
                invisible_ms = duration_ms(request.invisible_duration)
            else:  # a PushConsumer (auto_renew): the default
                invisible_ms = consumption.config.auto_renew_ms
            if not 0 < invisible_ms <= MAX_INVISIBLE_MS:
                raise BusinessError(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible_ms} ms is outside (0, 12 h]",
                )
            wait_s = (
                duration_ms(request.long_polling_timeout) / 1000
                if request.HasField("long_polling_timeout")
                else DEFAULT_POLL_S
            )
            remaining = context.time_remaining()
            if remaining is not None:
                wait_s = min(wait_s, remaining - DEADLINE_MARGIN_S)
            renew_for = client_id if request.auto_renew else ""  # a PushConsumer's
            messages = await consumption.receive(
                group, topic, TagFilter(expr.expression), request.batch_size, invisible_ms,
                wait_s, renew_for,
            )  # fmt: skip
        except BusinessError as e:
            yield spb.ReceiveMessageResponse(status=self._refused("ReceiveMessage", e))
            return
        if not messages:
            yield spb.ReceiveMessageResponse(
                status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message")
            )
            return
        yield spb.ReceiveMessageResponse(status=status.ok())
        for m in messages:
            yield spb.ReceiveMessageResponse(message=m)
        ts = Timestamp()
        ts.GetCurrentTime()
        yield spb.ReceiveMessageResponse(delivery_timestamp=ts)

    async def AckMessage(self, request, context):  # noqa: N802
        try:
            self._caller(context, "AckMessage")
            consumption = self._consumption()
            group = self._group(request.group)
        except BusinessError as e:
            return spb.AckMessageResponse(status=self._refused("AckMessage", e))
        reply = spb.AckMessageResponse()
        add = reply.entries.add
        codes = set()
        topic = request.topic.name
        for entry in request.entries:
            try:
                consumption.ack(group, topic, entry.receipt_handle)
                st = OK_STATUS
            except BusinessError as e:
                st = self._refused("AckMessage", e)
            codes.add(st.code)
            add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        if len(codes) > 1:
            top = pb.Status(code=pb.MULTIPLE_RESULTS, message="entries had different results")
        else:
            top = reply.entries[0].status if reply.entries else OK_STATUS
        reply.status.CopyFrom(top)
        return reply

    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        try:
            self._caller(context, "ChangeInvisibleDuration")
            consumption = self._consumption()
            group = self._group(request.group)
            ms = duration_ms(request.invisible_duration)
            if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
                raise BusinessError(
                    pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms is outside [0, 12 h]"
                )
            receipt = consumption.change(group, request.topic.name, request.receipt_handle, ms)
        except BusinessError as e:
            return spb.ChangeInvisibleDurationResponse(
                status=self._refused("ChangeInvisibleDuration", e)
            )
        return spb.ChangeInvisibleDurationResponse(status=status.ok(), receipt_handle=receipt)

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        try:
            self._caller(context, "ForwardMessageToDeadLetterQueue")
            consumption = self._consumption()
            group = self._group(request.group)
            await consumption.forward(group, request.topic.name, request.receipt_handle)
        except BusinessError as e:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=self._refused("ForwardMessageToDeadLetterQueue", e)
            )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status.ok())
