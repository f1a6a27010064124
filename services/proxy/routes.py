"""QueryRoute's answer: one MessageQueue per queue of the topic on this broker (id 0 — the
clients drop other ids), at the address clients must dial; in a cluster, also those of the
other live brokers, each at its own proxy's address."""

import ipaddress
from typing import Protocol

from rmqstore import broker_perm
from rmqstore.broker_perm import PermissionReader
from rmqstore.formats.topics_json import TopicConfig
from rmqstore.rocketmq import definition_pb2 as pb

ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


def endpoints(address: str) -> pb.Endpoints:
    """``host:port`` (or ``[v6]:port``) as Endpoints with the right scheme."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = pb.IPv6 if ipaddress.ip_address(host).version == 6 else pb.IPv4
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


def accepted_types(topic: TopicConfig) -> list:
    kind = topic.message_type
    return list(ALL_TYPES) if kind == "MIXED" else [pb.MessageType.Value(kind)]


def broker_queues(topic: str, broker: pb.Broker, read_nums: int, write_nums: int,
                  readable: bool, writable: bool, types: list) -> list[pb.MessageQueue]:
    """One MessageQueue per queue of ``topic`` on ``broker``."""
    out = []
    for i in range(max(read_nums, write_nums)):
        read = readable and i < read_nums
        write = writable and i < write_nums
        perm = {
            (True, True): pb.READ_WRITE, (True, False): pb.READ,
            (False, True): pb.WRITE, (False, False): pb.NONE,
        }[(read, write)]  # fmt: skip
        out.append(
            pb.MessageQueue(
                topic=pb.Resource(name=topic),
                id=i,
                permission=perm,
                broker=broker,
                accept_message_types=types,
            )  # fmt: skip
        )
    return out


class OtherBrokers(Protocol):
    """The queues of a topic on the cluster's other live brokers (``cluster_routes``)."""

    async def queues(self, topic: str, types: list) -> list[pb.MessageQueue]: ...


class Router:
    """``permission``: the broker's (``rmqstore.broker_perm``); none: read-write."""

    def __init__(self, broker_name: str, advertise: str, others: OtherBrokers | None = None,
                 permission: PermissionReader | None = None) -> None:  # fmt: skip
        self.broker = pb.Broker(name=broker_name, id=0, endpoints=endpoints(advertise))
        self.others = others
        self.permission = permission

    async def writable(self) -> bool:
        """Whether this broker takes sends (not drained)."""
        return self.permission is None or broker_perm.writable(await self.permission.current())

    def queues(self, topic: TopicConfig, writable: bool = True) -> list[pb.MessageQueue]:
        """This broker's queues of ``topic`` (``writable``: the broker's permission)."""
        return broker_queues(topic.name, self.broker, topic.read_queue_nums,
                             topic.write_queue_nums, topic.readable, topic.writable and writable,
                             accepted_types(topic))  # fmt: skip

    async def cluster_queues(self, topic: TopicConfig) -> list[pb.MessageQueue]:
        """This broker's queues and those of every other live broker of the cluster, each
        with its own proxy's endpoints (clients dial them; nothing is forwarded). A drained
        broker's queues are READ: producers leave them, consumers go on reading them."""
        mine = self.queues(topic, await self.writable())
        if self.others is None:
            return mine
        others = await self.others.queues(topic.name, accepted_types(topic))
        return mine + [q for q in others if q.broker.name != self.broker.name]
