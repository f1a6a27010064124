"""The proxy in front of a slave writer (as on every slave pod of the Helm chart): a send is
refused, not stored, with the writer's reason naming the master; over the writer's gRPC and
over its put socket."""

import pytest

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from tests import procs

pytestmark = pytest.mark.integration
MD = (("x-mq-client-id", "test@1@0@x"), ("x-mq-language", "PYTHON"))


def test_a_slave_s_proxy_refuses_sends_naming_the_master(tmp_path) -> None:
    master = f"127.0.0.1:{procs.free_port()}"  # nothing listens: the slave retries meanwhile
    sock = str(tmp_path / "w.sock")
    writer = procs.start(
        "services.commitlog", "--store", str(tmp_path / "store"), "--listen", "127.0.0.1:0",
        "--commitlog-segment-size", str(4 << 20), "--role", "slave", "--ha-master", master,
        "--put-socket", sock,
    )  # fmt: skip
    proxies = []
    try:
        for extra in ((), ("--commitlog-socket", sock)):
            proxies.append(procs.start(
                "services.proxy", "--listen", "127.0.0.1:0", "--commitlog", writer.address,
                *extra))  # fmt: skip
        w = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
        before = w.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset
        sp = pb.SystemProperties(message_type=pb.NORMAL, body_encoding=pb.IDENTITY,
                                 message_id="0102FC0000000136BF0B19630500000000")
        m = pb.Message(topic=pb.Resource(name="Orders"), body=b"hello", system_properties=sp)
        for proxy in proxies:
            stub = service_pb2_grpc.MessagingServiceStub(channel(proxy.address))
            r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
            assert r.status.code != pb.OK
            assert f"slave of {master}" in r.status.message, r.status
            assert "send puts to the master" in r.status.message
        assert w.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset == before
    finally:
        for p in proxies:
            p.stop()
        writer.stop()
