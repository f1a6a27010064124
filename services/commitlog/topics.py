"""The topic configuration (``config/topics.json``), owned by the writer's process.

Every other process asks through the ``Topics`` service (the proxy to route and to create
topics on first send, ``rmqstore topic`` to administer them), so the file has one writer.
It is read once at start and replaced atomically on every change.

A topic that holds messages but has no entry (put through the project's own API, which names
its queues, or written by another tool) is adopted when it is first asked about: it gets an
entry with as many queues as it uses, read and write, as RocketMQ registers a topic on its
first send. So ``rmqstore topic list`` shows every topic, and the proxy routes a RocketMQ
producer to the queues already in use.
"""

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rmqstore import durable
from rmqstore.broker_perm import PermissionFile
from rmqstore.errors import InvalidArgumentError, NotFoundError, ReadOnlyError
from rmqstore.formats import topics_json
from rmqstore.formats.topics_json import TopicConfig, TopicTable
from rmqstore.layout import validate_topic
from rmqstore.server import grpc_errors
from rmqstore.v1 import topics_pb2, topics_pb2_grpc

add_to_server = topics_pb2_grpc.add_TopicsServicer_to_server


class TopicStore:
    """topics.json in memory, saved on every change; thread-safe."""

    def __init__(
        self, root: Path, max_queues: int, read_only: bool = False,
        in_use: Callable[[], Mapping[tuple[str, int], int]] = dict,
    ) -> None:  # fmt: skip
        """``in_use``: the store's queues that hold messages, (topic, queue) → next offset."""
        self.path = Path(root) / "config" / "topics.json"
        # topics deleted while they held messages: not adopted again (until created again)
        self.deleted_path = self.path.with_name("topicsDeleted.json")
        self.max_queues = max_queues
        self.read_only = read_only
        self.in_use = in_use
        self._lock = threading.Lock()
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            text = ""
        try:
            self.table: TopicTable = topics_json.parse(text)
        except ValueError as e:
            raise ValueError(f"{self.path}: {e}") from None
        try:
            names = json.loads(self.deleted_path.read_text())
        except FileNotFoundError:
            names = []
        except ValueError as e:
            raise ValueError(f"{self.deleted_path}: {e}") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{self.deleted_path}: not a list of topic names")
        self.deleted: set[str] = set(names)

    def get(self, name: str) -> TopicConfig:
        topic = self.table.topics.get(name) or self._adopt(name).get(name)
        if topic is None:
            raise NotFoundError(f"topic {name} does not exist")
        return topic

    def list(self) -> list[TopicConfig]:
        topics = self._adopt()
        return [topics[n] for n in sorted(topics)]

    def _adopt(self, only: str | None = None) -> dict[str, TopicConfig]:
        """The table with the topics in use that it lacks (``only``: that one) added, and
        saved unless the store is read-only."""
        queues: dict[str, int] = {}
        for (topic, q), next_offset in dict(self.in_use()).items():  # a copy: puts go on
            if next_offset > 0 and (only is None or topic == only) and topic not in self.deleted:
                queues[topic] = max(queues.get(topic, 0), q + 1)
        with self._lock:
            new = {n: TopicConfig(n, count, count, topics_json.PERM_READ_WRITE)
                   for n, count in queues.items() if n not in self.table.topics}  # fmt: skip
            if not new:
                return self.table.topics
            table = TopicTable({**self.table.topics, **new}, self.table.counter + 1,
                               int(time.time() * 1000))  # fmt: skip
            if not self.read_only:
                durable.replace_file(self.path, topics_json.render(table).encode())
            self.table = table
            return table.topics

    def replace(self, table: TopicTable) -> bool:
        """Take ``table`` (a slave: its master's, ``config_copy``); whether it changed."""
        with self._lock:
            if table.topics == self.table.topics:
                return False
            durable.replace_file(self.path, topics_json.render(table).encode())
            self.table = table
            return True

    def create(self, name: str, queue_nums: int = 0, perm: int = 0,
               message_type: str = "") -> tuple[TopicConfig, bool]:  # fmt: skip
        """The topic, created unless it exists (then unchanged); and whether it was made."""
        queues, perm, kind = self.checked(name, queue_nums, perm, message_type)
        with self._lock:
            existing = self.table.topics.get(name)
            if existing is not None:
                return existing, False
            if self.read_only:
                raise ReadOnlyError(
                    f"topic {name} does not exist, and this store is served "
                    "read-only (--read-only): no topic can be created"
                )
            topic = TopicConfig(name, queues, queues, perm, attributes=_typed({}, kind))
            self._save({**self.table.topics, name: topic})
            return topic, True

    def checked(self, name: str, queue_nums: int = 0, perm: int = 0,
                message_type: str = "") -> tuple[int, int, str]:  # fmt: skip
        """What ``create`` would make of these (queues, perm, message type), or
        ``InvalidArgumentError``; changes nothing."""
        self._check_name(name)
        queues = self._check_queues(queue_nums or self.max_queues)
        perm = self._check_perm(perm)
        return queues, perm, _check_type(message_type or "MIXED")

    def update(self, name: str, read_queue_nums: int, write_queue_nums: int,
               perm: int = 0, message_type: str = "") -> TopicConfig:  # fmt: skip
        """The topic with these queue counts and perm (and message type, when given):
        created, or changed when it exists (RocketMQ's UPDATE_AND_CREATE_TOPIC; its other
        fields stay)."""
        self._check_name(name)
        read = self._check_queues(read_queue_nums)
        write = self._check_queues(write_queue_nums)
        perm = self._check_perm(perm)
        kind = _check_type(message_type) if message_type else ""
        with self._lock:
            existing = self.table.topics.get(name)
            if self.read_only:
                raise ReadOnlyError(f"topic {name} cannot be changed: this store is served "
                                    "read-only (--read-only)")  # fmt: skip
            if existing is None:
                topic = TopicConfig(name, read, write, perm, attributes=_typed({}, kind))
            else:
                topic = dataclasses.replace(
                    existing, read_queue_nums=read, write_queue_nums=write, perm=perm,
                    attributes=_typed(existing.attributes, kind) if kind else existing.attributes,
                )  # fmt: skip
                if topic == existing:
                    return existing
            self._save({**self.table.topics, name: topic})
            return topic

    def delete(self, name: str) -> bool:
        """Remove the topic's entry (its messages stay, and are not adopted again); whether
        it had one."""
        with self._lock:
            if self.read_only:
                raise ReadOnlyError(f"topic {name} cannot be deleted: this store is served "
                                    "read-only (--read-only)")  # fmt: skip
            had = name in self.table.topics
            if name not in self.deleted:
                deleted = sorted(self.deleted | {name})
                durable.replace_file(self.deleted_path, json.dumps(deleted).encode())
                self.deleted.add(name)
            if had:
                self._save({n: t for n, t in self.table.topics.items() if n != name})
            return had

    def _save(self, topics: dict[str, TopicConfig]) -> None:
        """Write and take ``topics`` (the lock held); a name in it is no longer deleted."""
        table = TopicTable(topics, self.table.counter + 1, int(time.time() * 1000))
        durable.replace_file(self.path, topics_json.render(table).encode())
        self.table = table
        back = self.deleted & topics.keys()
        if back:
            durable.replace_file(self.deleted_path,
                                 json.dumps(sorted(self.deleted - back)).encode())  # fmt: skip
            self.deleted -= back

    @staticmethod
    def _check_name(name: str) -> None:
        try:
            validate_topic(name)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"bad topic name: {e}") from None

    def _check_queues(self, queues: int) -> int:
        if not 1 <= queues <= self.max_queues:
            raise InvalidArgumentError(
                f"queue count {queues} is outside 1..{self.max_queues} (the writer's "
                "--queues-per-topic)"
            )
        return queues

    @staticmethod
    def _check_perm(perm: int) -> int:
        perm = perm or topics_json.PERM_READ_WRITE
        if perm & ~7:
            raise InvalidArgumentError(f"perm {perm} is not a sum of 4 (read), 2 (write), 1")
        return perm


def to_proto(t: TopicConfig, created: bool = False) -> topics_pb2.TopicConfig:
    return topics_pb2.TopicConfig(
        name=t.name,
        read_queue_nums=t.read_queue_nums,
        write_queue_nums=t.write_queue_nums,
        perm=t.perm,
        order=t.order,
        topic_sys_flag=t.topic_sys_flag,
        topic_filter_type=t.topic_filter_type,
        attributes=t.attributes,
        created=created,
    )


class TopicsServicer(topics_pb2_grpc.TopicsServicer):
    def __init__(self, store: TopicStore, run_blocking, permission: PermissionFile) -> None:
        self.store = store
        self.run_blocking = run_blocking
        self.permission = permission

    @grpc_errors
    async def CreateTopic(self, request, context):  # noqa: N802
        topic, created = await self.run_blocking(
            self.store.create, request.name, request.queue_nums, request.perm,
            request.message_type,
        )  # fmt: skip
        return to_proto(topic, created)

    @grpc_errors
    async def GetTopic(self, request, context):  # noqa: N802
        # off the loop: a topic in use but not listed yet is written to the file first
        return to_proto(await self.run_blocking(self.store.get, request.name))

    @grpc_errors
    async def ListTopics(self, request, context):  # noqa: N802
        topics = await self.run_blocking(self.store.list)
        return topics_pb2.TopicList(topics=[to_proto(t) for t in topics])

    @grpc_errors
    async def UpdateTopic(self, request, context):  # noqa: N802
        topic = await self.run_blocking(
            self.store.update, request.name, request.read_queue_nums, request.write_queue_nums,
            request.perm, request.message_type,
        )  # fmt: skip
        return to_proto(topic)

    @grpc_errors
    async def DeleteTopic(self, request, context):  # noqa: N802
        deleted = await self.run_blocking(self.store.delete, request.name)
        return topics_pb2.DeleteTopicReply(deleted=deleted)

    @grpc_errors
    async def GetBrokerPermission(self, request, context):  # noqa: N802
        return topics_pb2.BrokerPermission(perm=self.permission.perm)

    @grpc_errors
    async def SetBrokerPermission(self, request, context):  # noqa: N802
        perm = await self.run_blocking(self.permission.set, request.perm)
        return topics_pb2.BrokerPermission(perm=perm)


def _check_type(message_type: str) -> str:
    kind = message_type.upper()
    if kind not in topics_json.MESSAGE_TYPES:
        raise InvalidArgumentError(
            f"message type {message_type!r} is not one of " + ", ".join(topics_json.MESSAGE_TYPES)
        )
    return kind


def _typed(attributes: dict[str, str], kind: str) -> dict[str, str]:
    """``attributes`` with the message type ``kind`` (MIXED, the default, is no attribute)."""
    out = {k: v for k, v in attributes.items() if k != topics_json.MESSAGE_TYPE_ATTRIBUTE}
    if kind and kind != "MIXED":
        out[topics_json.MESSAGE_TYPE_ATTRIBUTE] = kind
    return out
