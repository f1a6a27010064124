"""Topics as the remoting front end sees them: the writer's ``Topics`` service, cached
briefly. Names are checked as RocketMQ 4.9.8's broker checks them, with its remarks."""

import re
import time

import grpc

from rmqstore.formats.topics_json import MESSAGE_TYPE_ATTRIBUTE, TopicConfig
from rmqstore.v1 import topics_pb2, topics_pb2_grpc

CACHE_S = 5.0
TOPIC_MAX_LENGTH = 127
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
DEFAULT_TOPIC = "TBW102"  # RocketMQ's template for auto-created topics (perm 7: inheritable)
DEFAULT_TOPIC_QUEUES = 8
SYSTEM_TOPICS = frozenset(
    (
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
    )
)


class TopicError(Exception):
    """A topic name or lookup refused: the message is RocketMQ's remark."""


def check_name(topic: str) -> None:
    """RocketMQ 4.9.8's ``TopicValidator.validateTopic`` remarks."""
    if not topic.strip():
        raise TopicError("The specified topic is blank.")
    if not TOPIC_PATTERN.match(topic):
        raise TopicError(
            f"The specified topic[{topic}] contains illegal characters, allowing "
            "only ^[%|a-zA-Z0-9_-]+$"
        )
    if len(topic) > TOPIC_MAX_LENGTH:
        raise TopicError(f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.")


def message_type_of(attributes: str) -> str:
    """The message type UPDATE_AND_CREATE_TOPIC's ``attributes`` sets (RocketMQ 5's field:
    entries split by commas, ``+message.type=FIFO`` sets it, ``-message.type`` removes it, so
    MIXED); "" when it names none. Any other attribute: ``TopicError`` (none is kept here)."""
    kind = ""
    for entry in filter(None, (e.strip() for e in attributes.split(","))):
        key, _, value = entry.partition("=")
        if key == MESSAGE_TYPE_ATTRIBUTE and value:
            kind = value
        elif key == "-" + MESSAGE_TYPE_ATTRIBUTE[1:] and not value:
            kind = "MIXED"
        else:
            kept = f"{MESSAGE_TYPE_ATTRIBUTE}=TYPE and -message.type"
            raise TopicError(f"unsupported topic attribute {entry!r}: only {kept} are kept")
    return kind


def from_proto(t: topics_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        t.name,
        t.read_queue_nums,
        t.write_queue_nums,
        t.perm,
        t.order,
        t.topic_sys_flag,
        t.topic_filter_type,
        dict(t.attributes),
    )


def to_json(t: TopicConfig) -> dict[str, object]:
    """A TopicConfig as a 4.9 broker serializes it (registrations, GET_ALL_TOPIC_CONFIG)."""
    return {
        "order": t.order,
        "perm": t.perm,
        "readQueueNums": t.read_queue_nums,
        "topicFilterType": t.topic_filter_type or "SINGLE_TAG",
        "topicName": t.name,
        "topicSysFlag": t.topic_sys_flag,
        "writeQueueNums": t.write_queue_nums,
    }


DEFAULT = TopicConfig(
    DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUES, DEFAULT_TOPIC_QUEUES, 7, False, 0, "SINGLE_TAG", {}
)


class Topics:
    """The writer's topic table. ``changed`` is called after this front end created a topic
    (the name servers must learn of it)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.stub = topics_pb2_grpc.TopicsStub(channel)
        self._cache: dict[str, tuple[float, TopicConfig]] = {}

    def cached(self, name: str) -> TopicConfig | None:
        """The topic's configuration when ``get`` has it without asking, else None."""
        if name == DEFAULT_TOPIC:
            return DEFAULT
        hit = self._cache.get(name)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < CACHE_S else None

    async def get(self, name: str) -> TopicConfig | None:
        """The topic's configuration, None when it does not exist (TBW102 always does)."""
        config: TopicConfig | None = self.cached(name)
        if config is not None:
            return config
        now = time.monotonic()
        try:
            config = from_proto(
                await self.stub.GetTopic(topics_pb2.GetTopicRequest(name=name))
            )
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                raise TopicError(f"topic configuration unavailable: {e.details()}") from None
            config = None
        if config is not None:  # an unknown topic is asked again: it may be created any time
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[name] = (now, config)
        return config

    async def create(self, name: str, queue_nums: int, perm: int,
                     message_type: str = "") -> TopicConfig:  # fmt: skip
        """The topic, created unless it exists (0 queues: the writer's default)."""
        request = topics_pb2.CreateTopicRequest(name=name, queue_nums=queue_nums, perm=perm,
                                                message_type=message_type)  # fmt: skip
        try:
            config = from_proto(await self.stub.CreateTopic(request))
        except grpc.aio.AioRpcError as e:
            raise TopicError(f"create topic[{name}] failed: {e.details()}") from None
        self._cache[name] = (time.monotonic(), config)
        return config

    async def update(self, name: str, read_queue_nums: int, write_queue_nums: int,
                     perm: int, message_type: str = "") -> TopicConfig:  # fmt: skip
        """The topic created, or its queue counts and perm (and message type, when given)
        changed."""
        request = topics_pb2.UpdateTopicRequest(
            name=name, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
            perm=perm, message_type=message_type,
        )  # fmt: skip
        try:
            config = from_proto(await self.stub.UpdateTopic(request))
        except grpc.aio.AioRpcError as e:
            raise TopicError(f"update topic[{name}] failed: {e.details()}") from None
        self._cache[name] = (time.monotonic(), config)
        return config

    async def delete(self, name: str) -> bool:
        """Remove the topic from the writer's table; whether it was there."""
        self._cache.pop(name, None)
        try:
            reply = await self.stub.DeleteTopic(topics_pb2.DeleteTopicRequest(name=name))
        except grpc.aio.AioRpcError as e:
            raise TopicError(f"delete topic[{name}] failed: {e.details()}") from None
        finally:
            self._cache.pop(name, None)
        return reply.deleted

    async def all(self) -> list[TopicConfig]:
        """Every topic of the store, and TBW102."""
        try:
            reply = await self.stub.ListTopics(topics_pb2.ListTopicsRequest())
        except grpc.aio.AioRpcError as e:
            raise TopicError(f"topic configuration unavailable: {e.details()}") from None
        topics = [from_proto(t) for t in reply.topics]
        if all(t.name != DEFAULT_TOPIC for t in topics):
            topics.append(DEFAULT)
        return topics
