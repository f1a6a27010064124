"""A sync_master writer's put statuses through the proxy, as RocketMQ 5 answers them
(spec rocketmq-ha.md §5): SLAVE_NOT_AVAILABLE → HA_NOT_AVAILABLE (50002), FLUSH_SLAVE_TIMEOUT
→ SLAVE_PERSISTENCE_TIMEOUT (50402), the message stored either way; over the writer's gRPC
and over its put socket."""

import time

import pytest

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, topics_pb2, topics_pb2_grpc
from tests import procs
from tests.ha_peer import PeerSlave

pytestmark = pytest.mark.integration
MD = (("x-mq-client-id", "test@1@0@x"), ("x-mq-language", "PYTHON"))
MSG_ID = "0102FC0000000136BF0B19630500000000"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    root = tmp_path_factory.mktemp("replica")
    ha_port = procs.free_port()
    sock = str(root / "w.sock")
    writer = procs.start(
        "services.commitlog", "--store", str(root / "store"), "--listen", "127.0.0.1:0",
        "--commitlog-segment-size", str(4 << 20), "--role", "sync_master",
        "--slave-timeout", "0.5", "--ha-port", str(ha_port), "--put-socket", sock,
    )  # fmt: skip
    proxies = []
    try:
        for extra in ((), ("--commitlog-socket", sock)):
            proxies.append(procs.start(
                "services.proxy", "--listen", "127.0.0.1:0", "--commitlog", writer.address,
                *extra))  # fmt: skip
        topics = topics_pb2_grpc.TopicsStub(channel(writer.address))
        topics.CreateTopic(topics_pb2.CreateTopicRequest(name="Known", queue_nums=4))
        yield writer, ha_port, proxies
    finally:
        for p in proxies:
            p.stop()
        writer.stop()


def _send(proxy) -> spb.SendMessageResponse:
    sp = pb.SystemProperties(message_type=pb.NORMAL, body_encoding=pb.IDENTITY, message_id=MSG_ID)
    m = pb.Message(topic=pb.Resource(name="Known"), body=b"hello", system_properties=sp)
    stub = service_pb2_grpc.MessagingServiceStub(channel(proxy.address))
    return stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)


def _writer(writer):
    return commitlog_pb2_grpc.CommitLogStub(channel(writer.address))


def _codes(r: spb.SendMessageResponse) -> tuple[int, list[int]]:
    return r.status.code, [e.status.code for e in r.entries]


def test_replica_statuses_are_rocketmq_5_codes(services):
    writer, ha_port, proxies = services
    w = _writer(writer)
    for proxy in proxies:
        before = w.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset
        assert _codes(_send(proxy)) == (pb.HA_NOT_AVAILABLE, [pb.HA_NOT_AVAILABLE])
        assert w.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset > before

    slave = PeerSlave("127.0.0.1", ha_port, first_report=0)
    slave.follow()
    try:
        deadline = time.monotonic() + 20
        while not w.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10).replication.slaves:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for proxy in proxies:
            r = _send(proxy)
            assert _codes(r) == (pb.OK, [pb.OK]) and r.entries[0].message_id == MSG_ID
        slave.acking = False
        for proxy in proxies:
            r = _send(proxy)
            assert _codes(r) == (pb.SLAVE_PERSISTENCE_TIMEOUT, [pb.SLAVE_PERSISTENCE_TIMEOUT])
            assert "FLUSH_SLAVE_TIMEOUT" in r.entries[0].status.message
    finally:
        slave.close()
