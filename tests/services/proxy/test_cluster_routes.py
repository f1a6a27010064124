"""The other brokers' queues from a name server's route: live masters with an announced
proxy only, each at its own proxy's endpoints."""

from rmqstore.rocketmq import definition_pb2 as pb
from services.proxy.cluster_routes import queues_of_route

ROUTE = {
    "brokerDatas": [
        {"brokerName": "a", "brokerAddrs": {"0": "10.0.0.1:10911"}, "cluster": "C"},
        {"brokerName": "b", "brokerAddrs": {"0": "10.0.0.2:10911"}, "cluster": "C"},
        {"brokerName": "c", "brokerAddrs": {"1": "10.0.0.3:10911"}, "cluster": "C"},  # slave
        {"brokerName": "d", "brokerAddrs": {"0": "10.0.0.4:10911"}, "cluster": "C"},
    ],
    "queueDatas": [
        {"brokerName": "b", "perm": 4, "readQueueNums": 2, "writeQueueNums": 2},
        {"brokerName": "a", "perm": 6, "readQueueNums": 2, "writeQueueNums": 1},
        {"brokerName": "c", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2},
        {"brokerName": "d", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2},
    ],
}
PROXIES = {"a": "10.0.0.1:8104", "b": "10.0.0.2:8104", "c": "10.0.0.3:8104"}  # d: none


def test_live_brokers_with_a_proxy_each_at_its_own_endpoints():
    queues = queues_of_route("T", ROUTE, PROXIES, [pb.NORMAL])
    got = [(q.broker.name, q.id, q.permission, q.broker.endpoints.addresses[0].host,
            q.broker.endpoints.addresses[0].port, q.broker.id) for q in queues]  # fmt: skip
    assert got == [
        ("a", 0, pb.READ_WRITE, "10.0.0.1", 8104, 0),
        ("a", 1, pb.READ, "10.0.0.1", 8104, 0),
        ("b", 0, pb.READ, "10.0.0.2", 8104, 0),  # write permission wiped (draining)
        ("b", 1, pb.READ, "10.0.0.2", 8104, 0),
    ]
    assert all(q.topic.name == "T" and list(q.accept_message_types) == [pb.NORMAL]
               for q in queues)  # fmt: skip


def test_no_route_no_queues():
    assert queues_of_route("T", {}, PROXIES, [pb.NORMAL]) == []
