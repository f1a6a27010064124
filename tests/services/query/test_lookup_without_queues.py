"""Key and id lookups need the index only: a topic holding just a prepared transaction
message (no consume queue, ever), and topics put while no consume-queue builder runs."""

import pytest

from rmqstore.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    indexer_pb2,
    indexer_pb2_grpc,
    query_pb2,
    query_pb2_grpc,
)
from tests import procs
from tests.reliability.cluster import fresh_channel, wait_until

pytestmark = pytest.mark.integration
PREPARED = 0x4


def test_lookups_by_key_and_uniq_key_without_a_consume_queue(tmp_path):
    store = str(tmp_path / "store")
    w = procs.start("services.commitlog", "--store", store, "--listen", "127.0.0.1:0",
                    "--commitlog-segment-size", str(1 << 20))
    started = [w]
    try:
        ix = procs.start("services.indexer", "index", "--store", store, "--commitlog",
                         w.address, "--listen", "127.0.0.1:0", "--flush-interval-ms", "50",
                         "--index-slots", "100", "--index-entries", "400")
        started.append(ix)
        q = procs.start("services.query", "--store", store, "--commitlog", w.address,
                        "--listen", "127.0.0.1:0", "--index-slots", "100",
                        "--index-entries", "400")
        started.append(q)
        writer = commitlog_pb2_grpc.CommitLogStub(fresh_channel(w.address))
        rs = writer.PutBatch(commitlog_pb2.PutBatchRequest(messages=[
            common_pb2.Message(topic="TxOnly", body=b"half", keys="tx-key", sys_flag=PREPARED),
            common_pb2.Message(topic="Fresh", body=b"first", keys="fresh-key"),
        ]), timeout=10).results
        end = max(r.phy_offset + r.size for r in rs)
        builder = indexer_pb2_grpc.BuilderStub(fresh_channel(ix.address))
        wait_until(lambda: builder.GetProgress(indexer_pb2.GetProgressRequest(),
                                               timeout=5).durable_offset >= end,
                   30, "the index builder to index both")
        assert not (tmp_path / "store" / "consumequeue").exists()
        query = query_pb2_grpc.QueryStub(fresh_channel(q.address))
        found = {}
        for topic, key in (("TxOnly", "tx-key"), ("Fresh", "fresh-key")):
            found[topic] = [m.body for m in query.QueryByKey(
                query_pb2.QueryByKeyRequest(topic=topic, key=key), timeout=10).messages]
            by_id = query.QueryById(query_pb2.QueryByIdRequest(
                id=next(r.unique_key for r in rs if r.topic == topic)), timeout=10).messages
            found[topic + " by UNIQ_KEY"] = [m.body for m in by_id]
        print("without any consume queue:", found)
        assert found == {"TxOnly": [b"half"], "TxOnly by UNIQ_KEY": [b"half"],
                         "Fresh": [b"first"], "Fresh by UNIQ_KEY": [b"first"]}
    finally:
        for p in reversed(started):
            p.stop()
