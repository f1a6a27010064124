"""Two ``rmqstore serve`` nodes on loopback: a sync_master and its slave (each with every
service), the slave queryable and drained with its master; ``rmqstore admin promote`` on the
slave node after the master stopped, and the promoted node takes puts through its own
proxy's writer, still drained."""

import subprocess
import sys

import grpc
import pytest

from rmqstore.broker_perm import READ_ONLY
from rmqstore.server import channel
from rmqstore.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    query_pb2,
    query_pb2_grpc,
    topics_pb2,
    topics_pb2_grpc,
)
from tests import procs
from tests.services.commitlog.replicas import wait_for
from tests.services.proxy.conftest import Serve

pytestmark = pytest.mark.integration


def _writer(node: Serve) -> commitlog_pb2_grpc.CommitLogStub:
    return commitlog_pb2_grpc.CommitLogStub(channel(node.address(0)))


def _end(node: Serve) -> int:
    return _writer(node).GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=10).max_offset


def _perm(node: Serve, set_to: int | None = None) -> int:
    stub = topics_pb2_grpc.TopicsStub(channel(node.address(0)))
    if set_to is not None:
        return stub.SetBrokerPermission(topics_pb2.BrokerPermission(perm=set_to), timeout=10).perm
    return stub.GetBrokerPermission(topics_pb2.GetBrokerPermissionRequest(), timeout=10).perm


def test_two_serve_nodes_replicate_and_switch_over(tmp_path):
    master = Serve(tmp_path / "a", "--role", "sync_master", "--no-metrics")
    slave = None
    try:
        slave = Serve(tmp_path / "b", "--role", "slave", "--ha-master", master.address(6),
                      "--ha-master-commitlog", master.address(0), "--ha-retry-seconds", "0.2",
                      "--config-copy-seconds", "0.5", "--no-metrics")  # fmt: skip
        w = _writer(master)
        wait_for(lambda: w.GetStatus(commitlog_pb2.GetStatusRequest(), timeout=10)
                 .replication.in_sync == 1, 60, "the slave node to follow")  # fmt: skip
        msgs = [common_pb2.Message(topic="Orders", queue_id=i % 2, keys=f"order-{i}",
                                   body=b"x" * 100) for i in range(50)]  # fmt: skip
        r = w.PutBatch(commitlog_pb2.PutBatchRequest(messages=msgs), timeout=30)
        assert {x.status for x in r.results} == {commitlog_pb2.PUT_OK}
        end = _end(master)
        wait_for(lambda: _end(slave) == end, 60, "the slave node to catch up")
        q = query_pb2_grpc.QueryStub(channel(slave.address(1)))

        def found() -> bool:  # NOT_FOUND until the slave's index builder has the topic
            try:
                return bool(q.QueryByKey(query_pb2.QueryByKeyRequest(
                    topic="Orders", key="order-7"), timeout=10).messages)  # fmt: skip
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                return False

        wait_for(found, 60, "order-7 found on the slave node")

        assert _perm(master, READ_ONLY) == READ_ONLY  # the broker group drained
        wait_for(lambda: _perm(slave) == READ_ONLY, 60, "the slave to copy the drain")
        assert master.stop() == 0
        promoted = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "admin", "promote", "--commitlog",
             slave.address(0)], cwd=procs.ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert promoted.returncode == 0, promoted
        assert "promoted: async_master, master term 1 from offset" in promoted.stdout
        put = _writer(slave).Put(commitlog_pb2.PutRequest(message=msgs[0]), timeout=10)
        assert put.status == commitlog_pb2.PUT_OK and put.phy_offset == end
        assert _perm(slave) == READ_ONLY  # the promotion did not undo the drain
    finally:
        if slave is not None:
            assert slave.stop() == 0, "".join(slave.lines)
        master.stop()
