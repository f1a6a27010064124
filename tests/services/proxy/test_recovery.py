"""A restarted proxy finds the transactions left open in the store (half messages without an
op record) and checks them again: here none is answered, so the new proxy rolls it back;
a transaction ended before the restart is left alone."""

import asyncio
import time

import grpc
import pytest

from rmqstore.formats import commitlog as cl
from rmqstore.formats import consume_queue as cq
from rmqstore.layout import TRANS_HALF_TOPIC, TRANS_OP_TOPIC, StoreLayout
from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from rmqstore.rocketmq import service_pb2_grpc
from rmqstore.segments import segment_name
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2
from services.commitlog.config import WriterConfig
from services.commitlog.engine import CommitLogEngine
from services.proxy.appender import Appender
from services.proxy.clients import ClientRegistry
from services.proxy.config import ProxyConfig
from services.proxy.recovery import recover
from services.proxy.transactions import (
    Transactions,
    half_record,
    op_record,
    parse_transaction_id,
    transaction_id,
)
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


def test_a_half_message_not_yet_in_the_queue_files_at_the_start_is_found_later(tmp_path):
    """The consume-queue builder is down while the proxy restarts: the open transaction's
    half message is in the commitlog only. Once the builder runs, the proxy finds it and
    (unanswered) rolls it back (before, it was never looked at again)."""
    store = tmp_path / "store"
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(4 << 20))  # fmt: skip
    started = [writer]
    try:
        first = procs.start("services.proxy", "--listen", "127.0.0.1:0", "--commitlog",
                            writer.address, "--store", str(store))  # fmt: skip
        open_tid = _tx(first, "0102FC0000000136BF0B19630500000020")
        first.stop()
        assert not (store / "consumequeue").exists()  # no builder has run
        second = procs.start(
            "services.proxy", "--listen", "127.0.0.1:0", "--commitlog", writer.address,
            "--store", str(store), "--transaction-timeout", "0.2",
            "--transaction-check-interval", "0.2", "--transaction-check-max", "1",
        )  # fmt: skip
        started.insert(0, second)
        started.append(start_builder("consume-queue", store, writer.address))
        _, open_queue_offset = parse_transaction_id(open_tid)
        _wait("rolled back by the restarted proxy once the queue is built",
              lambda: _op_bodies(writer) == [open_queue_offset])  # fmt: skip
    finally:
        for p in started:
            p.stop()


HALVES_AFTER = 100_000  # more resolved half messages than recovery once looked back over


def test_an_open_transaction_older_than_many_resolved_ones_is_found(tmp_path):
    """An open half message followed by 100,000 ended ones (each with its op record): it is
    found (before, only the newest 100,000 half messages were looked at)."""
    store = tmp_path / "store"
    engine = CommitLogEngine(WriterConfig(store=store, segment_size=64 << 20))
    try:
        old = common_pb2.Message(topic="Pay", body=b"old", unique_key="ID-OLD")
        (half,) = engine.put([half_record(old)])
        ops = []
        for start in range(1, HALVES_AFTER + 1, 10_000):
            ops += engine.put([op_record(q) for q in range(start, start + 10_000)])
    finally:
        engine.close()
    layout = StoreLayout.of(store)
    # the consume queues as the builder writes them; the resolved halves' units point at
    # the open one's record (never read: their op records end them)
    for topic, units in ((TRANS_HALF_TOPIC, [half] * (HALVES_AFTER + 1)), (TRANS_OP_TOPIC, ops)):
        qdir = layout.queue_dir(topic, 0)
        qdir.mkdir(parents=True)
        data = b"".join(cq.encode(cq.CqUnit(r.phy_offset, r.size, 0)) for r in units)
        (qdir / segment_name(0)).write_bytes(data + b"\0" * cq.UNIT_SIZE)
    writer = procs.start("services.commitlog", "--store", str(store), "--listen", "127.0.0.1:0",
                         "--commitlog-segment-size", str(64 << 20))  # fmt: skip
    try:

        async def run() -> dict:
            ch = grpc.aio.insecure_channel(writer.address)
            tx = Transactions(ProxyConfig(), Appender(ch), ClientRegistry())
            assert await recover(store, tx) == 1
            await ch.close()
            return tx.open

        found = asyncio.run(run())
        assert list(found) == [transaction_id(half.phy_offset, 0)]
        assert found[transaction_id(half.phy_offset, 0)].message_id == "ID-OLD"
    finally:
        writer.stop()
