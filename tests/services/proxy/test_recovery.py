"""A restarted proxy finds the transactions left open in the store (half messages without an
op record) and checks them again: here none is answered, so the new proxy rolls it back;
a transaction ended before the restart is left alone."""

import time

import pytest

from rmqstore.formats import commitlog as cl
from rmqstore.layout import TRANS_OP_TOPIC
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc
from services.proxy.transactions import parse_transaction_id
from tests import procs
from tests.services.indexer.test_services import start_builder

pytestmark = pytest.mark.integration
MD = (("x-mq-client-id", "recovery@1@0@x"),)


def _tx(proxy, message_id: str) -> str:
    sp = pb.SystemProperties(message_id=message_id, message_type=pb.TRANSACTION)
    m = pb.Message(topic=pb.Resource(name="Pay"), body=b"half", system_properties=sp)
    stub = service_pb2_grpc.MessagingServiceStub(channel(proxy.address))
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
    assert r.status.code == pb.OK, r
    return r.entries[0].transaction_id


def _op_bodies(writer) -> list[int]:
    stub = commitlog_pb2_grpc.CommitLogStub(channel(writer.address))
    end = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest()).max_offset
    out, at = [], 0
    while at < end:
        [raw] = stub.ReadRecords(commitlog_pb2.ReadRecordsRequest(offsets=[at])).records
        r = cl.decode(raw)
        if r.topic == TRANS_OP_TOPIC:
            out.append(int(r.body))
        at += r.total_size
    return out


def _wait(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)  # polling the condition


def test_open_transactions_are_checked_again_after_a_restart(tmp_path):
    store = tmp_path / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(4 << 20))  # fmt: skip
    builder = start_builder("consume-queue", store, writer.address)
    started = [builder, writer]
    try:
        first = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                            writer.address, "--store", str(store))  # fmt: skip
        started.insert(0, first)
        open_tid = _tx(first, "0102FC0000000136BF0B19630500000010")
        ended_tid = _tx(first, "0102FC0000000136BF0B19630500000011")
        stub = service_pb2_grpc.MessagingServiceStub(channel(first.address))
        end = spb.EndTransactionRequest(
            topic=pb.Resource(name="Pay"), message_id="0102FC0000000136BF0B19630500000011",
            transaction_id=ended_tid, resolution=pb.COMMIT)  # fmt: skip
        assert stub.EndTransaction(end, metadata=MD, timeout=10).status.code == pb.OK
        first.stop()
        half_dir = store / "consumequeue" / "RMQ_SYS_TRANS_HALF_TOPIC" / "0"
        op_dir = store / "consumequeue" / TRANS_OP_TOPIC / "0"
        _wait("consume queues built", lambda: half_dir.is_dir() and op_dir.is_dir()
              and any(f.stat().st_size for f in op_dir.iterdir()))  # fmt: skip
        second = procs.start(
            "services.proxy", "--listen", "127.0.0.1:0", "--commitlog", writer.address,
            "--store", str(store), "--transaction-timeout", "0.2",
            "--transaction-check-interval", "0.2", "--transaction-check-max", "1",
        )  # fmt: skip
        started.insert(0, second)
        _, open_queue_offset = parse_transaction_id(open_tid)
        _, ended_queue_offset = parse_transaction_id(ended_tid)
        _wait("rolled back by the restarted proxy",
              lambda: open_queue_offset in _op_bodies(writer))  # fmt: skip
        assert sorted(_op_bodies(writer)) == sorted([ended_queue_offset, open_queue_offset])
    finally:
        for p in started:
            p.stop()
