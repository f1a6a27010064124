"""Real processes on loopback: a slave writer (and its builders and query service) following
the spec-written peer master (``tests/ha_peer.py``), which serves RocketMQ 4.9.8's golden store
or a store our writer wrote."""

import urllib.request

import grpc
import pytest

from rmqstore.formats import consume_queue as cq
from rmqstore.server import channel
from rmqstore.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, query_pb2, query_pb2_grpc
from tests import procs
from tests.ha_peer import PeerMaster
from tests.services.commitlog.replicas import SEGMENT, files, source_store, wait_for
from tests.services.indexer.helpers import (
    GOLDEN_CQ_ENTRIES,
    GOLDEN_ENTRIES,
    GOLDEN_SLOTS,
    assert_same_index,
    tree_bytes,
)
from tests.services.indexer.test_services import start_builder, wait_durable

pytestmark = pytest.mark.integration


def start_slave(store, peer: PeerMaster, address: str = "127.0.0.1:0",
                *extra: str) -> procs.ServiceProcess:  # fmt: skip
    return procs.start(
        "services.commitlog", "--store", str(store), "--listen", address,
        "--commitlog-segment-size", str(SEGMENT), "--flush-interval-ms", "50",
        "--role", "slave", "--ha-master", f"127.0.0.1:{peer.port}", "--ha-retry-seconds", "0.1",
        *extra,
    )  # fmt: skip


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.golden
def test_a_slave_of_rocketmqs_golden_store_is_identical_and_queryable(
    tmp_path, golden_store, golden_expected
):
    """RocketMQ 4.9.8's store, served by the peer in 997-byte frames (records split across
    them): the slave's commit log is the same bytes; its builders make consume queues
    byte-identical to RocketMQ's and the same index entries; queries work; puts are refused
    naming the master; delayed messages stay parked (no delivery on a slave)."""
    end = golden_expected["commitlogMaxOffset"]
    # the master is still in its first file when the slave connects: it gets everything
    peer = PeerMaster(golden_store / "commitlog", SEGMENT, max_frame=997, end=40_000)
    store = tmp_path / "slave"
    metrics_port = procs.free_port()
    writer = start_slave(store, peer, "127.0.0.1:0", "--metrics-port", str(metrics_port))
    cqb = start_builder("consume-queue", store, writer.address,
                        "--cq-entries-per-file", str(GOLDEN_CQ_ENTRIES))  # fmt: skip
    ixb = start_builder("index", store, writer.address, "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))  # fmt: skip
    query = procs.start("services.query", "--store", str(store), "--commitlog", writer.address,
                        "--listen", "127.0.0.1:0", "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))  # fmt: skip
    try:
        wait_for(lambda: peer.acked > 39_000, 60, "the slave to acknowledge its first bytes")
        assert peer.first_reports == [0]
        peer.set_end(end)
        assert peer.wait_acked(end, 60), writer.lines[-20:]
        with channel(writer.address) as ch:
            stub = commitlog_pb2_grpc.CommitLogStub(ch)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Put(commitlog_pb2.PutRequest(
                    message=common_pb2.Message(topic="TopicA", body=b"x")), timeout=10)  # fmt: skip
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert f"slave of 127.0.0.1:{peer.port}; send puts to the master" in (
                refused.value.details())  # fmt: skip
            offsets = stub.GetOffsets(commitlog_pb2.GetOffsetsRequest(), timeout=5)
            assert offsets.max_offset == end
        text = scrape(metrics_port)
        assert "rmqstore_ha_slave_connected 1.0" in text
        assert f"rmqstore_ha_slave_offset_bytes {float(end)}" in text
        assert "rmqstore_ha_slave_diverged 0.0" in text
        for b in (cqb, ixb):
            wait_durable(b, end, 60)
        first = golden_expected["messages"][0]["stored"]
        with channel(query.address) as ch:
            q = query_pb2_grpc.QueryStub(ch)
            found = q.QueryById(query_pb2.QueryByIdRequest(id=first["msgId"]), timeout=10)
            assert [m.phy_offset for m in found.messages] == [first["phyOffset"]]
            pulled = q.Pull(query_pb2.PullRequest(topic=first["topic"], queue_id=first["queueId"],
                                                  offset=0), timeout=10)  # fmt: skip
            assert pulled.status == query_pb2.FOUND and pulled.messages
        assert cqb.stop() == 0 and ixb.stop() == 0 and query.stop() == 0
        assert writer.stop() == 0
    finally:
        for p in (query, cqb, ixb, writer):
            p.kill()
        peer.close()
    assert files(store / "commitlog") == files(golden_store / "commitlog")
    assert tree_bytes(store / "consumequeue") == tree_bytes(golden_store / "consumequeue")
    assert_same_index(store / "index", golden_store / "index")


def test_a_slave_killed_mid_record_resumes_and_ends_identical(tmp_path):
    """``kill -9`` while a record is half received: the restarted slave recovers, reports
    the end of its whole records at once and ends with the source's bytes."""
    source = tmp_path / "master"
    end = source_store(source, 600)
    peer = PeerMaster(source / "commitlog", SEGMENT, max_frame=997, end=30_000)
    store = tmp_path / "slave"
    address = f"127.0.0.1:{procs.free_port()}"
    writer = start_slave(store, peer, address)
    try:
        wait_for(lambda: peer.acked > 29_000, 60, "the slave to acknowledge its first bytes")
        peer.set_end(100_000)  # inside a record of the second file
        wait_for(lambda: peer.acked > 99_000, 60, "the slave to acknowledge 99,000")
        acked = peer.acked
        writer.kill()
        writer = start_slave(store, peer, address)
        wait_for(lambda: len(peer.first_reports) == 2, 60, "the restarted slave to report")
        assert acked <= peer.first_reports[1] < 100_000
        peer.set_end(end)
        assert peer.wait_acked(end, 60), writer.lines[-20:]
        assert writer.stop() == 0
    finally:
        writer.kill()
        peer.close()
    assert files(store / "commitlog") == files(source / "commitlog")


@pytest.mark.golden
def test_an_empty_slave_of_rocketmqs_store_starts_at_its_last_file(
    tmp_path, golden_store, golden_expected
):
    """An empty slave gets the master's last file only: its consume queues hold RocketMQ's
    units from there on and pre-blank units (offset 0, size 2^31-1, tags 0) before them, in
    the same files as RocketMQ's; the index finds the messages it holds."""
    end = golden_expected["commitlogMaxOffset"]
    low = end - end % SEGMENT
    peer = PeerMaster(golden_store / "commitlog", SEGMENT)
    store = tmp_path / "slave"
    writer = start_slave(store, peer)
    cqb = start_builder("consume-queue", store, writer.address,
                        "--cq-entries-per-file", str(GOLDEN_CQ_ENTRIES))  # fmt: skip
    ixb = start_builder("index", store, writer.address, "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))  # fmt: skip
    query = procs.start("services.query", "--store", str(store), "--commitlog", writer.address,
                        "--listen", "127.0.0.1:0", "--index-slots", str(GOLDEN_SLOTS),
                        "--index-entries", str(GOLDEN_ENTRIES))  # fmt: skip
    held = [m["stored"] for m in golden_expected["messages"] if m["stored"]["phyOffset"] >= low]
    try:
        assert peer.wait_acked(end, 60), writer.lines[-20:]
        for b in (cqb, ixb):
            wait_durable(b, end, 60)
        with channel(query.address) as ch:
            q = query_pb2_grpc.QueryStub(ch)
            for m in held:
                found = q.QueryById(query_pb2.QueryByIdRequest(id=m["uniqKey"]), timeout=10)
                assert m["phyOffset"] in [f.phy_offset for f in found.messages]
        assert cqb.stop() == 0 and ixb.stop() == 0 and query.stop() == 0
        assert writer.stop() == 0
    finally:
        for p in (query, cqb, ixb, writer):
            p.kill()
        peer.close()
    assert list(files(store / "commitlog")) == [f"{low:020d}"]
    ours, gold = tree_bytes(store / "consumequeue"), tree_bytes(golden_store / "consumequeue")
    assert ours and set(ours) <= set(gold)
    pre_blank, blanks = cq.UNIT.pack(0, 0x7FFFFFFF, 0), 0
    for name, data in ours.items():
        for at in range(0, len(data), cq.UNIT_SIZE):
            unit, theirs = data[at : at + cq.UNIT_SIZE], gold[name][at : at + cq.UNIT_SIZE]
            below = theirs != bytes(cq.UNIT_SIZE) and cq.UNIT.unpack(theirs)[0] < low
            assert unit == (pre_blank if below else theirs), (name, at)
            blanks += below
    assert blanks  # some queue did start mid-log
    for name, data in gold.items():  # every file with a unit the slave holds is there
        units = [cq.UNIT.unpack_from(data, at) for at in range(0, len(data), cq.UNIT_SIZE)]
        if any(size and off >= low for off, size, _ in units):
            assert name in ours
