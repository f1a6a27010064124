"""Topics as the proxy sees them: the writer's ``Topics`` service, cached briefly, with
creation on first use when ``auto_create_topics`` is on."""

import time

import grpc

from rmqstore.errors import InvalidArgumentError
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.layout import SCHEDULE_TOPIC, validate_topic
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.v1 import topics_pb2, topics_pb2_grpc
from services.proxy.status import BusinessError

CACHE_S = 5.0
SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "%RETRY%", "%DLQ%", "TBW102")


def check_name(name: str) -> None:
    """ILLEGAL_TOPIC for a name that cannot be a directory or is a system topic."""
    try:
        validate_topic(name)
    except InvalidArgumentError as e:
        raise BusinessError(pb.ILLEGAL_TOPIC, str(e)) from None
    if name == SCHEDULE_TOPIC or name.startswith(SYSTEM_PREFIXES):
        raise BusinessError(pb.ILLEGAL_TOPIC, f"topic {name} is a system topic")


def from_proto(t: topics_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        t.name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order, t.topic_sys_flag,
        t.topic_filter_type, dict(t.attributes),
    )  # fmt: skip


class TopicBook:
    def __init__(self, channel: grpc.aio.Channel, auto_create: bool) -> None:
        self.stub = topics_pb2_grpc.TopicsStub(channel)
        self.auto_create = auto_create
        self._cache: dict[str, tuple[float, TopicConfig]] = {}

    async def get(self, name: str, fresh: bool = False) -> TopicConfig:
        """The topic's configuration; TOPIC_NOT_FOUND unless it exists or may be created."""
        hit = self._cache.get(name)  # only valid names get cached
        now = time.monotonic()
        if hit is not None and not fresh and now - hit[0] < CACHE_S:
            return hit[1]
        check_name(name)
        try:
            t = from_proto(await self.stub.GetTopic(topics_pb2.GetTopicRequest(name=name)))
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                raise BusinessError(
                    pb.INTERNAL_SERVER_ERROR, f"topic configuration unavailable: {e.details()}"
                ) from None
            if not self.auto_create:
                raise BusinessError(pb.TOPIC_NOT_FOUND, f"topic {name} does not exist") from None
            t = await self.create(name)
        self._cache[name] = (now, t)
        return t

    async def create(self, name: str, queue_nums: int = 0, perm: int = 0) -> TopicConfig:
        """The topic, created unless it exists (0 queues / perm: the writer's defaults)."""
        request = topics_pb2.CreateTopicRequest(name=name, queue_nums=queue_nums, perm=perm)
        try:
            reply = await self.stub.CreateTopic(request)
        except grpc.aio.AioRpcError as e:
            code = (pb.ILLEGAL_TOPIC if e.code() == grpc.StatusCode.INVALID_ARGUMENT
                    else pb.INTERNAL_SERVER_ERROR)  # fmt: skip
            raise BusinessError(code, f"cannot create topic {name}: {e.details()}") from None
        return from_proto(reply)
