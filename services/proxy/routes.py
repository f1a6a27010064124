"""QueryRoute's answer: one MessageQueue per queue of the topic, all on this one broker
(id 0 — the clients drop other ids), at the address clients must dial."""

import ipaddress

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


class Router:
    def __init__(self, broker_name: str, advertise: str) -> None:
        self.broker = pb.Broker(name=broker_name, id=0, endpoints=endpoints(advertise))

    def queues(self, topic: TopicConfig) -> list[pb.MessageQueue]:
        types = accepted_types(topic)
        out = []
        for i in range(max(topic.read_queue_nums, topic.write_queue_nums)):
            read = topic.readable and i < topic.read_queue_nums
            write = topic.writable and i < topic.write_queue_nums
            perm = {
                (True, True): pb.READ_WRITE, (True, False): pb.READ,
                (False, True): pb.WRITE, (False, False): pb.NONE,
            }[(read, write)]  # fmt: skip
            out.append(
                pb.MessageQueue(
                    topic=pb.Resource(name=topic.name),
                    id=i,
                    permission=perm,
                    broker=self.broker,
                    accept_message_types=types,
                )  # fmt: skip
            )
        return out
